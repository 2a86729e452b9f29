"""The usage ledger and quotas in the deployment's Redis (service/usage.py says what they mean).

Imported only when `limits.redis_url` is set; it shares the rate limiter's connections. Like
the limiter, it lets requests through when Redis cannot be reached (counted in
`pli_gateway_limiter_errors_total`, logged at most every 10 s): usage is then not recorded.
"""

import logging
import time
from datetime import UTC, datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.auth import ApiKey
from service.metrics import Metrics
from service.usage import (
    USAGE_PREFIX,
    USAGE_RETENTION_DAYS,
    Ticket,
    period_bounds,
    quota_error,
    quota_key,
    usage_field,
)

log = logging.getLogger("service.redis_usage")

# Admitted while the period's tokens are under the quota; then the reservation is taken, in
# one step, so gateways racing for the last tokens see each other's reservations.
_ADMIT_LUA = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then return {0, used} end
used = redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return {1, used}
"""

# One answered request: its counts added to the day's record and, with a quota, the reservation
# settled to the real usage, together. A counter that has expired is not made again.
_SETTLE_LUA = """
if ARGV[1] == '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[5])
  redis.call('HINCRBY', KEYS[1], ARGV[4], ARGV[6])
  redis.call('EXPIRE', KEYS[1], ARGV[8])
end
if KEYS[2] and ARGV[7] ~= '0' and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('INCRBY', KEYS[2], ARGV[7])
end
return 1
"""


class RedisLedger:
    def __init__(self, client: "aioredis.Redis", metrics: Metrics) -> None:
        self._admit = client.register_script(_ADMIT_LUA)
        self._settle = client.register_script(_SETTLE_LUA)
        self._metrics = metrics
        self._last_warning = 0.0

    def _failed(self, exc: Exception) -> None:
        self._metrics.limiter_errors.inc()
        if time.monotonic() - self._last_warning > 10:
            self._last_warning = time.monotonic()
            log.warning("usage not recorded, quotas not enforced: redis unavailable: %s", exc)

    async def admit(self, key: ApiKey, tokens: int) -> Ticket:
        now = datetime.now(UTC)
        ticket = Ticket(day=now.date().isoformat())
        if not key.quota_tokens or not key.quota_period:
            return ticket
        period, resets = period_bounds(key.quota_period, now)
        counter = quota_key(key.name, period)
        # The counter outlives its period by a day, so a late settlement still finds it.
        expire_at = int(resets.timestamp()) + 86400
        try:
            ok, used = await self._admit(keys=[counter], args=[key.quota_tokens, tokens, expire_at])
        except (RedisError, OSError) as exc:
            self._failed(exc)
            return ticket
        if not int(ok):
            raise quota_error(key, int(used), resets, now)
        ticket.quota_key, ticket.reserved = counter, tokens
        return ticket

    async def release(self, key: ApiKey, ticket: Ticket) -> None:
        await self._run(ticket, key.name, "", None, None, 0)

    async def settle(
        self, key: ApiKey, model: str, ticket: Ticket, prompt: int | None, completion: int | None,
        used: int | None,
    ) -> None:
        await self._run(ticket, key.name, model, prompt, completion, used)

    async def _run(
        self, ticket: Ticket, name: str, model: str, prompt: int | None, completion: int | None,
        used: int | None,
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
        ]
        try:
            await self._settle(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            self._failed(exc)

    async def close(self) -> None:
        return None  # the limiter owns the connections
