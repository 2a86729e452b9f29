"""Per-key rate limits kept in Redis, so that all the gateways of a deployment share them.

Imported only when `limits.redis_url` is set: a gateway without it needs no redis package.
"""

import logging
from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.auth import ApiKey
from service.config import LimitsConfig, TLSConfig
from service.metrics import Metrics
from service.redis_connect import Endpoint, TLSFiles, async_client, parse_sentinel
from service.redis_outage import RedisOutage

log = logging.getLogger("service.redis_limits")


# The same bucket arithmetic as LocalLimiter, on Redis's clock (TIME) so that gateways with
# skewed clocks agree. A limit of 0 means unlimited. The record lives until its buckets are
# full again, so a debt taken at reconciliation is not forgiven by expiry.
# The wait goes back with all 17 digits: tostring() keeps 14, and a rounded wait can give a
# Retry-After a second off LocalLimiter's (tests/unit/service/test_parity_token_bucket.py).
_BUCKET_LUA = """
local rpm, tpm, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'r', 't', 's')
local r, tk = tonumber(b[1]) or rpm, tonumber(b[2]) or tpm
local dt = math.max(0, now - (tonumber(b[3]) or now))
if rpm > 0 then r = math.min(rpm, r + dt * rpm / 60) end
if tpm > 0 then tk = math.min(tpm, tk + dt * tpm / 60) end
local wait = 0
if ARGV[4] == 'reserve' then
  local req = tonumber(ARGV[5])
  if req > 0 and rpm > 0 and r < 1 then wait = (1 - r) * 60 / rpm end
  if tpm > 0 and tk < n then wait = math.max(wait, (n - tk) * 60 / tpm) end
  if wait == 0 then r = r - req; tk = tk - n end
elseif tpm > 0 then
  tk = math.min(tpm, tk + n)
end
redis.call('HSET', KEYS[1], 'r', r, 't', tk, 's', now)
local ttl = 60
if tpm > 0 and tk < tpm then ttl = math.max(ttl, (tpm - tk) * 60 / tpm) end
redis.call('EXPIRE', KEYS[1], math.ceil(ttl) + 1)
return string.format('%.17g', wait)
"""


def endpoint(limits: LimitsConfig, tls: TLSConfig | None) -> Endpoint:
    """The gateway configuration's Redis: its URL, and the sentinels that follow its primary."""
    assert limits.redis_url is not None
    files = None if tls is None else TLSFiles(str(tls.ca_file), str(tls.certfile), str(tls.keyfile))
    return Endpoint(limits.redis_url, tuple(parse_sentinel(s) for s in limits.redis_sentinels),
                    limits.redis_master, files)


class RedisLimiter:
    """Buckets in Redis, shared by all gateways. If Redis cannot be reached, `on_unavailable`
    decides (service/redis_outage.py): the request is admitted (open: limits protect fairness,
    not access; authentication stays local) or refused with 503 (closed); counted either way."""

    def __init__(
        self, where: Endpoint | str, metrics: Metrics, on_unavailable: Literal["open", "closed"] = "open",
    ) -> None:
        where = Endpoint(where) if isinstance(where, str) else where
        self._redis = async_client(where, 0.5)
        # With a replica behind Sentinel, usage and quota writes wait for it (service/redis_usage.py).
        self.replicated = bool(where.sentinels)
        self._script = self._redis.register_script(_BUCKET_LUA)
        self.outage = RedisOutage(on_unavailable, metrics, log)

    async def _run(self, key: ApiKey, tokens: int, mode: str, requests: int = 0) -> float:
        try:
            args: list[int | str] = [key.rpm or 0, key.tpm or 0, tokens, mode, requests]
            return float(await self._script(keys=[f"pli:limit:{key.limit_name}"], args=args))
        except (RedisError, OSError) as exc:
            if mode == "reserve":
                self.outage.check("limits", exc)  # raises 503 when closed
            else:
                self.outage.after("rate limits not reconciled", exc)
            return 0.0

    @property
    def client(self) -> "aioredis.Redis":
        """The connection pool, shared with the usage ledger (service/redis_usage.py)."""
        return self._redis

    async def reserve(self, key: ApiKey, tokens: int, requests: int = 1) -> float:
        return await self._run(key, tokens, "reserve", requests)

    async def adjust(self, key: ApiKey, tokens: int) -> None:
        if key.tpm:
            await self._run(key, tokens, "adjust")

    async def close(self) -> None:
        await self._redis.aclose()
