"""Usage accounting and per-key token quotas.

Every answered request adds one request and its engine-reported prompt and completion tokens to
a per-day (UTC) record of key and model; a key with a quota is admitted while its period's
tokens are under it. Both live in the deployment's Redis (service/redis_usage.py), so every
gateway counts into one place and the numbers outlive gateway restarts and upgrades. A gateway
without Redis (`limits.redis_url` unset) records nothing and enforces no quota: `NullLedger`.

A quota works like the tpm bucket: the request's estimated tokens are reserved on admission, so
requests in flight on other gateways count, and settled to the real usage when it ends. The
reservation is bounded by what is left: a request is admitted only if its prompt's estimate and
a token per choice fit, and its max_tokens is capped (set, if it had none) so that prompt plus
max_tokens times n fits too. So concurrent requests never reserve more than the quota, and the
charged total exceeds it only by how much the engine's prompt counts exceed the estimates.
"""

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from service.auth import ApiKey
from service.errors import GatewayError

# Redis names, read back by service/usage_report.py.
# + YYYY-MM-DD: a hash of "<r|p|c|x>:<key>:<model>" -> count (x: requests cut before the
# engine's usage, counted from the events relayed: see ProxyCall._settle)
USAGE_PREFIX = "pli:usage:"
QUOTA_PREFIX = "pli:quota:"  # + <key>:<period id>: tokens charged in that period
USAGE_RETENTION_DAYS = 400  # long enough for a year's monthly bills


TENANT_MARK = "~"  # in no key, caller or tenant name: "<caller>~<tenant>" splits back


def usage_field(kind: str, key: str, model: str) -> str:
    """A key name has no ':' (KEY_NAME_PATTERN), so the model, which may, goes last."""
    return f"{kind}:{key}:{model}"


def usage_caller(key: ApiKey) -> str:
    """The caller as usage records it: with its tenant, so `installer usage` reports by both."""
    return f"{key.name}{TENANT_MARK}{key.tenant}" if key.tenant else key.name


def period_bounds(period: str, now: datetime) -> tuple[str, datetime]:
    """The quota period `now` falls in: its id and the moment it ends (UTC)."""
    now = now.astimezone(UTC)
    if period == "day":
        start = datetime(now.year, now.month, now.day, tzinfo=UTC)
        return f"d{start.date().isoformat()}", start + timedelta(days=1)
    if period == "month":
        nxt = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
        return f"m{now.year:04d}-{now.month:02d}", nxt
    raise ValueError(f"unknown quota period {period!r}")


def quota_key(key: str, period_id: str) -> str:
    return f"{QUOTA_PREFIX}{key}:{period_id}"


@dataclass(slots=True)
class Ticket:
    """What a request was admitted with, settled when it ends."""

    day: str  # the UTC day its usage is recorded under: the day it was admitted
    quota_key: str | None = None  # the quota counter charged, if the key has a quota
    reserved: int = 0  # tokens reserved on that counter
    prompt_estimate: int = 0  # the gateway's estimate of the prompt, charged if a stream is cut
    completion_cap: int | None = None  # max tokens per choice the quota leaves, if it bounds them


def quota_error(key: ApiKey, used: int, resets: datetime, now: datetime, needs: int = 0) -> GatewayError:
    wait = max(1, math.ceil((resets - now).total_seconds()))
    when = resets.strftime("%Y-%m-%dT%H:%M:%SZ")
    quota = key.quota_tokens or 0
    short = (
        f", too few left for this request's prompt (about {needs} tokens)" if used < quota else ""
    )
    return GatewayError(
        429,
        f"Token quota reached for {key.limit_owner}: {quota} tokens per "
        f"{key.quota_period} (UTC), {used} used{short}; it resets at {when}.",
        "insufficient_quota",
        "quota_exceeded",
        {"Retry-After": str(wait)},
    )


class UsageLedger(Protocol):
    async def admit(self, key: ApiKey, prompt: int, completion: int | None, choices: int = 1) -> Ticket:
        """Reserve the request's tokens in the key's quota, or raise the 429 that says which and
        when: the prompt's estimate plus, per choice, `completion` (its max_tokens; None: not
        set; 0: an embedding) capped to what the quota has left, which the ticket's
        completion_cap then says (the request is sent with that max_tokens)."""

    async def release(self, key: ApiKey, ticket: Ticket) -> None:
        """Give the reservation back: the request was refused after admission."""

    async def settle(
        self, key: ApiKey, model: str, ticket: Ticket, prompt: int | None, completion: int | None,
        used: int | None, cut: bool = False,
    ) -> None:
        """Record an answered request (prompt is not None; `cut`: a stream cut before the
        engine's usage) and settle the quota to `used` tokens (None: the reservation stands)."""

    async def close(self) -> None: ...


class NullLedger:
    """No Redis: nothing recorded, no quota enforced (start-up warns about keys that have one)."""

    async def admit(self, key: ApiKey, prompt: int, completion: int | None, choices: int = 1) -> Ticket:
        return Ticket(day=date.today().isoformat(), prompt_estimate=prompt)

    async def release(self, key: ApiKey, ticket: Ticket) -> None:
        return None

    async def settle(
        self, key: ApiKey, model: str, ticket: Ticket, prompt: int | None, completion: int | None,
        used: int | None, cut: bool = False,
    ) -> None:
        return None

    async def close(self) -> None:
        return None
