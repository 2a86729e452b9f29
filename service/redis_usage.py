"""The usage ledger and quotas in the deployment's Redis (service/usage.py says what they mean).

Imported only when `limits.redis_url` is set; it shares the rate limiter's connections and its
`on_unavailable` choice (service/redis_outage.py): when Redis cannot be reached, a key with a
quota is admitted without it (open) or refused with 503 (closed); usage is then not recorded.

With a replica behind Sentinel (`wait_replica`), each quota reservation and usage write is
followed on the same connection by WAIT 1: it counts as written once the replica has it too, so
a failover (which promotes that replica) keeps it. A write the replica did not confirm within
WAIT_MS stays on the primary, is logged and counted in pli_gateway_limiter_errors_total, and is
lost only if the primary dies before it replicates (docs/ha.md#redis-that-survives-a-host-redisreplicas).
"""

import time
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.auth import ApiKey
from service.redis_outage import RedisOutage
from service.usage import (
    USAGE_PREFIX,
    USAGE_RETENTION_DAYS,
    Ticket,
    period_bounds,
    quota_error,
    quota_key,
    usage_caller,
    usage_field,
)

# Admitted only if the prompt's estimate and at least one token per choice fit in what is left
# of the period's quota; the completion per choice is capped to what is left after the prompt
# (ARGV[3]: the request's max_tokens, 0 when it set none, -1 for embeddings; one that set none
# is reserved ARGV[6], the default reserve, or less if less is left), and prompt plus cap times
# choices is reserved, in one step, so gateways racing for the last tokens see each other's
# reservations and together never reserve more than the quota.
_ADMIT_LUA = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local quota, prompt = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, choices = tonumber(ARGV[3]), tonumber(ARGV[4])
local per = 1
if want < 0 then per = 0 end
if used + prompt + per * choices > quota then return {0, used, 0} end
local cap = 0
if want >= 0 then
  cap = math.floor((quota - used - prompt) / choices)
  local asked = want
  if want == 0 then asked = tonumber(ARGV[6]) end
  if asked < cap then cap = asked end
end
used = redis.call('INCRBY', KEYS[1], prompt + cap * choices)
redis.call('EXPIREAT', KEYS[1], ARGV[5])
return {1, used, cap}
"""

# One answered request: its counts added to the day's record and, with a quota, the reservation
# settled to the real usage, together. A counter that has expired is not made again.
_SETTLE_LUA = """
if ARGV[1] == '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if ARGV[9] ~= '' then redis.call('HINCRBY', KEYS[1], ARGV[9], 1) end
  redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[5])
  redis.call('HINCRBY', KEYS[1], ARGV[4], ARGV[6])
  redis.call('EXPIRE', KEYS[1], ARGV[8])
end
if KEYS[2] and ARGV[7] ~= '0' and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('INCRBY', KEYS[2], ARGV[7])
end
return 1
"""


# A replica on the same network acknowledges in well under a millisecond; this bounds what a
# request waits before it is admitted when the replica has just gone.
WAIT_MS = 100
# After a WAIT that no replica confirmed (the replica's host is down, or it was just promoted and
# has none yet), writes go unconfirmed this long, so that requests do not each wait WAIT_MS.
UNREPLICATED_BACKOFF_S = 5.0


class NotReplicated(RedisError):
    """The write is on the primary, but the replica did not confirm it within WAIT_MS."""


class RedisLedger:
    def __init__(
        self, client: "aioredis.Redis", outage: RedisOutage, default_reserve: int = 1024, wait_replica: bool = False,
    ) -> None:
        self._client = client
        self._wait = wait_replica
        self._unconfirmed_until = 0.0
        self._admit = client.register_script(_ADMIT_LUA)
        self._settle = client.register_script(_SETTLE_LUA)
        self._outage = outage
        self._default_reserve = default_reserve

    async def admit(self, key: ApiKey, prompt: int, completion: int | None, choices: int = 1) -> Ticket:
        now = datetime.now(UTC)
        ticket = Ticket(day=now.date().isoformat(), prompt_estimate=prompt)
        if not key.quota_tokens or not key.quota_period:
            return ticket
        period, resets = period_bounds(key.quota_period, now)
        counter = quota_key(key.limit_name, period)
        # The counter outlives its period by a day, so a late settlement still finds it.
        expire_at = int(resets.timestamp()) + 86400
        want = -1 if completion == 0 else (completion or 0)
        try:
            ok, used, cap = await self._replicated(
                self._admit, [counter], [key.quota_tokens, prompt, want, choices, expire_at, self._default_reserve]
            )
        except NotReplicated as exc:
            self._outage.after("quota reservation not on the replica", exc)
            ok, used, cap = exc.args[1]
        except (RedisError, OSError) as exc:
            self._outage.check("quota", exc)  # raises 503 when closed
            return ticket
        if not int(ok):
            raise quota_error(key, int(used), resets, now, prompt + (want >= 0) * choices)
        ticket.quota_key, ticket.reserved = counter, prompt + int(cap) * choices
        # Always sent with max_tokens = the reservation, whether or not it set one: a request
        # sent uncapped could generate up to the model's context and charge past the quota.
        if want >= 0:
            ticket.completion_cap = int(cap)
        return ticket

    async def release(self, key: ApiKey, ticket: Ticket) -> None:
        await self._run(ticket, usage_caller(key), "", None, None, 0)

    async def settle(
        self, key: ApiKey, model: str, ticket: Ticket, prompt: int | None, completion: int | None,
        used: int | None, cut: bool = False,
    ) -> None:
        await self._run(ticket, usage_caller(key), model, prompt, completion, used, cut)

    async def _run(
        self, ticket: Ticket, name: str, model: str, prompt: int | None, completion: int | None,
        used: int | None, cut: bool = False,
    ) -> None:
        delta = 0 if used is None or ticket.quota_key is None else used - ticket.reserved
        record = prompt is not None
        if not record and not delta:
            return
        keys = [USAGE_PREFIX + ticket.day] + ([ticket.quota_key] if ticket.quota_key else [])
        args: list[int | str] = [
            "1" if record else "0",
            usage_field("r", name, model), usage_field("p", name, model), usage_field("c", name, model),
            prompt or 0, completion or 0, delta, USAGE_RETENTION_DAYS * 86400,
            usage_field("x", name, model) if cut else "",
        ]
        try:
            await self._replicated(self._settle, keys, args)
        except NotReplicated as exc:
            self._outage.after("usage recorded on the primary, not yet on the replica", exc)
        except (RedisError, OSError) as exc:
            self._outage.after("usage not recorded", exc)

    async def _replicated(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """The script's answer; with a replica, once the replica has its writes too. WAIT
        counts the writes of its own connection, so both go down one connection (a pipeline)."""
        if not self._wait or time.monotonic() < self._unconfirmed_until:
            return await script(keys=keys, args=args)
        async with self._client.pipeline(transaction=False) as pipe:
            await script(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", 1, WAIT_MS)
            answer, acks = await pipe.execute()
        if int(acks) < 1:
            self._unconfirmed_until = time.monotonic() + UNREPLICATED_BACKOFF_S
            raise NotReplicated(f"WAIT 1 {WAIT_MS}: no replica confirmed", answer)
        return answer

    async def close(self) -> None:
        return None  # the limiter owns the connections
