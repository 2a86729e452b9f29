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

The control machine's commands (service/release_admin.py, run on the controller's host) change
a release through scripts of their own: `start` pushes a spec only while no release runs, and
`stop` and `step` (abort, promote) take the lease over before they write, so a controller
that was mid-tick has its next write fenced and cannot step the weights after them.
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

# KEYS: lease, lease generation. ARGV: my token ('' for none), ttl ms, my holder name, '1' to
# renew only. Renew if I hold it; take it if it is free (unless renew only); else nothing.
_LEASE_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur and cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return cur
end
if cur or ARGV[4] == '1' then return false end
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


# KEYS: spec, state. ARGV: the new spec JSON. A spec goes in only when none is there, or the one
# there has ended (its state says so): returns 'ok', or the spec that runs (nothing written).
_PUSH_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local spec = cjson.decode(cur)
  local st = redis.call('GET', KEYS[2])
  local state = st and cjson.decode(st) or nil
  if not (state and state.release == spec.id and state.verdict ~= 'running') then return cur end
end
redis.call('SET', KEYS[1], ARGV[1])
return 'ok'
"""

# KEYS: lease, lease generation, spec, state, weights, weights generation. ARGV: the release's
# id, the installer's holder name, lease ttl ms, Redis-clock now, the action ('stop' or 'step'),
# the step the command saw ('step' only: a step the controller took meanwhile is not taken twice).
# The lease is taken over first (any controller's next write is fenced), then the state and the
# weights are written. Returns the new state JSON, or an error reply saying why nothing changed.
_COMMAND_LUA = """
local raw = redis.call('GET', KEYS[3])
if not raw then return redis.error_reply('no release is in Redis') end
local spec = cjson.decode(raw)
if spec.id ~= ARGV[1] then return redis.error_reply('Redis runs release ' .. spec.id .. ', not ' .. ARGV[1]) end
local st = redis.call('GET', KEYS[4])
local state = st and cjson.decode(st) or nil
if not state or state.release ~= spec.id then
  state = {release = spec.id, served_name = spec.served_name, step = 0, step_since = tonumber(ARGV[4]),
           weight = spec.steps[1], verdict = 'running'}
end
if ARGV[5] ~= 'stop' then  -- refused before anything is written: a refusal fences no one
  if state.verdict ~= 'running' then return redis.error_reply('the release is ' .. state.verdict) end
  if state.step ~= tonumber(ARGV[6]) then
    return redis.error_reply('the controller moved to step ' .. state.step .. ' meanwhile')
  end
end
local gen = redis.call('INCR', KEYS[2])
local token = ARGV[2] .. '#' .. gen
redis.call('SET', KEYS[1], token, 'PX', ARGV[3])
local weight
if ARGV[5] == 'stop' then
  if state.verdict == 'running' then state.verdict = 'aborted'; state.ended = tonumber(ARGV[4]) end
  weight = 0
else
  if state.step + 1 < #spec.steps then
    state.step = state.step + 1
    state.step_since = tonumber(ARGV[4])
  else
    state.verdict = 'promoted'
    state.ended = tonumber(ARGV[4])
  end
  weight = spec.steps[state.step + 1]
end
state.weight = weight
state.last = {at = tonumber(ARGV[4]), release = spec.id, model = spec.served_name, action = ARGV[5],
              kind = 'asked', weight = weight, holder = token,
              reasons = {ARGV[5] == 'stop' and 'installer release abort' or 'installer release promote'}}
redis.call('SET', KEYS[4], cjson.encode(state))
local wgen = redis.call('INCR', KEYS[6])
local models = {}
models[spec.served_name] = weight
redis.call('SET', KEYS[5], cjson.encode({generation = wgen, lease = token, release = spec.id, models = models}))
return cjson.encode(state)
"""

# KEYS: spec. ARGV: the release's id. The spec goes once its cleanup is done (the controller idles).
_FINISH_LUA = """
local raw = redis.call('GET', KEYS[1])
if raw and cjson.decode(raw).id == ARGV[1] then return redis.call('DEL', KEYS[1]) end
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

    def lease(self, renew_only: bool = False) -> bool:
        """Renew the lease, or take it if free: whether this controller holds it now.
        `renew_only`: never take a new one. Within a tick, a lease that lapsed while Prometheus
        answered may have been an installer command's in between (a promote or an abort); a new
        lease would let the tick write the state it read before that command."""
        got = self._lease(keys=[LEASE, LEASE_GENERATION],
                          args=[self.token or "", self.lease_ms, self.holder, "1" if renew_only else "0"])
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


class Refused(Exception):
    """A command that does not fit the release in Redis; nothing was written."""


def push_spec(client: "redis.Redis", spec: dict[str, Any]) -> None:
    """A new release for the controller (`installer release start`), or Refused naming the
    release that runs."""
    got = client.register_script(_PUSH_LUA)(keys=[SPEC, STATE], args=[json.dumps(spec, sort_keys=True)])
    got = got.decode() if isinstance(got, bytes) else got
    if got != "ok":
        running = _json(got) or {}
        raise Refused(f"the release controller runs release {running.get('id', '?')} of "
                      f"{running.get('served_name', '?')}")


def command(client: "redis.Redis", release: str, action: str, *, lease_ms: int, step: int = -1) -> dict[str, Any]:
    """`stop` (abort: canary 0%, the release aborted) or `step` (promote: the step after `step`,
    or promoted at the last) of `release`, the lease taken over first; the new state, or Refused."""
    seconds, micros = client.time()
    try:
        got = client.register_script(_COMMAND_LUA)(
            keys=[LEASE, LEASE_GENERATION, SPEC, STATE, WEIGHTS, WEIGHTS_GENERATION],
            args=[release, f"installer/{socket.gethostname()}", lease_ms, seconds + micros / 1e6, action, step])
    except redis.ResponseError as exc:
        raise Refused(str(exc)) from None
    return _json(got) or {}


def finish(client: "redis.Redis", release: str) -> bool:
    """The spec of `release` taken away once its cleanup is done; whether it was there."""
    return bool(client.register_script(_FINISH_LUA)(keys=[SPEC], args=[release]))


def _json(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
