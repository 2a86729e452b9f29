"""What the release controller keeps in the deployment's Redis (the one the gateways share for
limits and usage, password-protected):

    pli:release:spec      the release to run, pushed by `installer release start` (JSON)
    pli:release:state     the controller's record of it: step, step_since, verdict, last decision
    pli:release:weights   {"generation": n, "release": id, "models": {served name: canary
                          percent}}, which the gateways poll (service/release_weights.py)
    pli:release:lease     the token of the one controller that acts, with a deadline (PX)

Exactly one controller acts: a controller takes the lease only when it is free (SET NX PX
inside a script that also counts the lease generation), renews it only while it still holds
it (compare and set), and every write of the state or the weights goes through a script that
checks the writer's token first (fencing): a controller that lost its lease while it was
stopped, swapped out or cut off writes nothing.
"""

import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

import redis

SPEC, STATE, WEIGHTS = "pli:release:spec", "pli:release:state", "pli:release:weights"
LEASE, LEASE_GENERATION, WEIGHTS_GENERATION = "pli:release:lease", "pli:release:lease_gen", "pli:release:weights_gen"

# KEYS: lease, lease generation. ARGV: my token ('' for none), ttl ms, my holder name.
# Renew if I hold it; take it if it is free; else nothing.
_LEASE_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur and cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return cur
end
if cur then return false end
local gen = redis.call('INCR', KEYS[2])
local token = ARGV[3] .. '#' .. gen
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
"""

# KEYS: lease, state, weights, weights generation. ARGV: my token, state JSON, weights JSON of
# {served: percent} or '' (unchanged), the release's id. Returns the weights generation written,
# 0 without weights, -1 when the token is not the lease's (nothing written).
_WRITE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] == '' then return 0 end
local gen = redis.call('INCR', KEYS[4])
local doc = {generation = gen, lease = ARGV[1], release = ARGV[4], models = cjson.decode(ARGV[3])}
redis.call('SET', KEYS[3], cjson.encode(doc))
return gen
"""

# KEYS: lease. ARGV: my token. Frees it only if mine.
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Fenced(Exception):
    """A write by a controller that no longer holds the lease."""


def holder_name() -> str:
    """This process among the controllers: host, PID and a nonce per start (a restarted
    controller waits for its old lease to expire instead of writing as the process that held it)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


@dataclass
class Store:
    client: "redis.Redis"
    holder: str
    lease_ms: int = 10_000
    token: str | None = None

    def __post_init__(self) -> None:
        self._lease = self.client.register_script(_LEASE_LUA)
        self._write = self.client.register_script(_WRITE_LUA)
        self._free = self.client.register_script(_RELEASE_LUA)

    def now(self) -> float:
        """Redis's clock, so that two controllers on skewed hosts agree on how long a step was held."""
        seconds, micros = self.client.time()
        return seconds + micros / 1e6

    def lease(self) -> bool:
        """Renew the lease, or take it if free: whether this controller holds it now."""
        got = self._lease(keys=[LEASE, LEASE_GENERATION], args=[self.token or "", self.lease_ms, self.holder])
        self.token = got.decode() if got else None
        return self.token is not None

    def give_up(self) -> None:
        if self.token is not None:
            self._free(keys=[LEASE], args=[self.token])
            self.token = None

    def lease_holder(self) -> str | None:
        got: Any = self.client.get(LEASE)
        return got.decode() if isinstance(got, bytes) else got

    def spec(self) -> dict[str, Any] | None:
        return _json(self.client.get(SPEC))

    def state(self) -> dict[str, Any] | None:
        return _json(self.client.get(STATE))

    def weights(self) -> dict[str, Any] | None:
        return _json(self.client.get(WEIGHTS))

    def write(self, state: dict[str, Any], weights: dict[str, int] | None = None) -> int:
        """The state (and the weights of the state's release, if given) under the lease; Fenced
        if not ours."""
        if self.token is None:
            raise Fenced("this controller holds no lease")
        got = int(self._write(keys=[LEASE, STATE, WEIGHTS, WEIGHTS_GENERATION],
                              args=[self.token, json.dumps(state, sort_keys=True),
                                    "" if weights is None else json.dumps(weights, sort_keys=True),
                                    str(state.get("release", ""))]))
        if got < 0:
            self.token = None
            raise Fenced("the lease passed to another controller")
        return got


def push_spec(client: "redis.Redis", spec: dict[str, Any]) -> None:
    """A new release for the controller (installer release start, through the Redis host)."""
    client.set(SPEC, json.dumps(spec, sort_keys=True))


def _json(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
