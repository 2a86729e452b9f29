"""The per-key token bucket exists twice on purpose: in Python (LocalLimiter, and the workers'
SharedLimiter over the same functions) and as the Lua script RedisLimiter runs inside Redis, so
that several gateways share one limit. Both are driven here with the same (time, operation,
tokens) steps and must give the same admit/refuse decisions, the same waits and Retry-After,
and leave the same requests and tokens in the bucket.

The Lua runs in a real redis-server, through RedisLimiter itself. Only its clock is replaced:
`redis.call('TIME')` reads a hash the test sets before each step instead of the server's clock,
so both sides see the same instants."""

import asyncio
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_sync

from service import limits, redis_limits, shared
from service.auth import ApiKey
from service.errors import GatewayError
from service.limits import Limiter, LocalLimiter, reserve_or_raise
from service.metrics import Metrics
from service.redis_limits import RedisLimiter
from service.shared import SharedLimiter, SharedState
from tests.support.redis_server import redis_server

CLOCK_KEY = "pli:test:clock"
SERVER_CLOCK = "redis.call('TIME')"
TEST_CLOCK = f"redis.call('HMGET', '{CLOCK_KEY}', 'sec', 'usec')"
T0 = 1_700_000_000  # seconds on both clocks at the first step


@dataclass(frozen=True)
class Step:
    at_us: int  # microseconds after T0
    # "reserve" (a request and its tokens, through reserve_or_raise as the gateway does), "tokens"
    # (tokens alone: the request was charged on its headers) or "adjust"
    op: str
    tokens: int


KEYS = {
    "rpm": ApiKey("rpm", b"", rpm=3),
    "tpm": ApiKey("tpm", b"", tpm=1000),
    "both": ApiKey("both", b"", rpm=2, tpm=500),
    "odd": ApiKey("odd", b"", rpm=7, tpm=333),
}

# Each key's steps: bursts past the limit (at one instant, so a bucket holds exactly what is
# asked), partial refills at odd instants, a request larger than the whole bucket (clamped to it),
# give-backs above the cap and debts (negative adjust), and an idle spell long enough to fill the
# bucket to its cap again.
STEPS = {
    "rpm": [
        Step(0, "reserve", 0), Step(0, "reserve", 0), Step(0, "reserve", 0), Step(0, "reserve", 0),
        Step(7_500_000, "reserve", 0), Step(19_999_999, "reserve", 0), Step(20_000_001, "reserve", 0),
        Step(20_000_002, "reserve", 0), Step(400_000_000, "reserve", 0), Step(400_000_001, "reserve", 0),
    ],
    "tpm": [
        Step(0, "reserve", 400), Step(0, "reserve", 400), Step(0, "reserve", 200), Step(20, "reserve", 400),
        Step(1_234_567, "adjust", 350), Step(1_234_568, "reserve", 400), Step(2_000_000, "reserve", 5000),
        Step(2_000_001, "adjust", -700), Step(9_000_000, "reserve", 1), Step(59_000_000, "reserve", 999),
        Step(61_000_000, "adjust", 5000), Step(61_000_001, "reserve", 1000), Step(61_000_002, "reserve", 1),
    ],
    "both": [
        Step(0, "reserve", 100), Step(1, "reserve", 100), Step(2, "reserve", 100),
        Step(30_000_000, "reserve", 450), Step(30_000_001, "adjust", -300), Step(44_444_444, "reserve", 10),
        Step(89_999_999, "reserve", 200), Step(90_000_000, "adjust", 120), Step(90_000_001, "reserve", 700),
        Step(1_000_000_000, "reserve", 500), Step(1_000_000_001, "reserve", 0),
        # requests spent, tokens left: tokens alone still pass; then tokens spent too
        Step(1_000_000_002, "reserve", 0), Step(1_000_000_003, "tokens", 300), Step(1_000_000_004, "tokens", 300),
    ],
    "odd": [
        Step(i * 1_111_111, ("adjust", "reserve", "tokens", "reserve")[i % 4],
             (i * 97) % 400 - (150 if i % 4 == 0 else 0))
        for i in range(40)
    ],
}


Refusal = tuple[int, dict[str, str] | None, str]  # status, headers, message


@dataclass(frozen=True)
class Outcome:
    wait: float  # what the limiter returned: 0.0 admits, else seconds until it would
    error: Refusal | None  # the 429 reserve_or_raise raised
    requests: float  # what is left in the bucket after the step
    tokens: float


class Recording:
    """Passes calls to a limiter and keeps the wait its reserve returned."""

    def __init__(self, inner: Limiter) -> None:
        self.inner = inner
        self.wait = 0.0

    async def reserve(self, key: ApiKey, tokens: int, requests: int = 1) -> float:
        self.wait = await self.inner.reserve(key, tokens, requests)
        return self.wait

    async def adjust(self, key: ApiKey, tokens: int) -> None:
        await self.inner.adjust(key, tokens)

    async def close(self) -> None:
        await self.inner.close()


def _now(at_us: int) -> float:
    # The Lua's arithmetic for TIME's two fields: seconds + microseconds / 1000000.
    return T0 + at_us / 1_000_000


async def _step(limiter: Recording, key: ApiKey, step: Step) -> tuple[float, Refusal | None]:
    limiter.wait = 0.0
    if step.op == "adjust":
        await limiter.adjust(key, step.tokens)
        return 0.0, None
    try:
        await reserve_or_raise(limiter, key, step.tokens, requests=0 if step.op == "tokens" else 1)
    except GatewayError as exc:
        return limiter.wait, (exc.status, exc.headers, str(exc))
    return limiter.wait, None


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _python_run(
    limiter: Limiter, key: ApiKey, steps: list[Step], clock: list[float], bucket: Callable[[], tuple[float, float]]
) -> list[Outcome]:
    recording = Recording(limiter)
    outcomes = []
    for step in steps:
        clock[0] = _now(step.at_us)
        wait, error = asyncio.run(_step(recording, key, step))
        outcomes.append(Outcome(wait, error, *bucket()))
    return outcomes


def _local(key: ApiKey, steps: list[Step], monkeypatch: pytest.MonkeyPatch) -> list[Outcome]:
    clock = [0.0]
    monkeypatch.setattr(limits, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    limiter = LocalLimiter()

    def bucket() -> tuple[float, float]:
        b = limiter._buckets[key.name]
        return b.requests, b.tokens

    return _python_run(limiter, key, steps, clock, bucket)


def _shared(key: ApiKey, steps: list[Step], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Outcome]:
    clock = [0.0]
    monkeypatch.setattr(shared, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    state = SharedState(1, [], tmp_path / "limits.lock", slots=16)
    state.attach(0)

    def bucket() -> tuple[float, float]:
        seen: list[tuple[float, float]] = []
        state.update(key, lambda b: seen.append((b.requests, b.tokens)))  # no time passed: no refill
        return seen[0]

    return _python_run(SharedLimiter(state), key, steps, clock, bucket)


def _redis(url: str, key: ApiKey, steps: list[Step], monkeypatch: pytest.MonkeyPatch) -> list[Outcome]:
    assert redis_limits._BUCKET_LUA.count(SERVER_CLOCK) == 1, (
        f"the bucket script no longer reads its clock with {SERVER_CLOCK}: "
        "update TEST_CLOCK here so both sides still see the same instants"
    )
    monkeypatch.setattr(redis_limits, "_BUCKET_LUA", redis_limits._BUCKET_LUA.replace(SERVER_CLOCK, TEST_CLOCK))
    direct = redis_sync.Redis.from_url(url, decode_responses=True)
    record = f"pli:limit:{key.name}"
    direct.delete(record)

    async def run() -> list[Outcome]:
        metrics = Metrics()
        limiter = Recording(RedisLimiter(url, metrics))
        outcomes = []
        try:
            for step in steps:
                direct.hset(CLOCK_KEY, mapping={"sec": T0 + step.at_us // 1_000_000, "usec": step.at_us % 1_000_000})
                wait, error = await _step(limiter, key, step)
                # RedisLimiter admits when the script fails: a failure must not pass for a decision.
                assert not metrics.registry.get_sample_value("pli_gateway_limiter_errors_total")
                requests, tokens = (float(str(v)) for v in direct.hmget(record, "r", "t"))
                outcomes.append(Outcome(wait, error, requests, tokens))
        finally:
            await limiter.close()
        return outcomes

    try:
        return asyncio.run(run())
    finally:
        direct.close()


def _same(python: list[Outcome], lua: list[Outcome], steps: list[Step], side: str) -> None:
    for i, (p, r, step) in enumerate(zip(python, lua, steps, strict=True)):
        where = f"step {i} {step} ({side} vs Lua)"
        assert (p.wait > 0) == (r.wait > 0), f"{where}: admit/refuse differ: {p} vs {r}"
        # Exact: the same IEEE operations in the same order, and every number crosses from Lua
        # with all its digits (a rounded wait once gave Retry-After 37 where Python said 38).
        assert (p.wait, p.requests, p.tokens) == (r.wait, r.requests, r.tokens), where
        assert p.error == r.error, where  # the 429 the client gets: message and Retry-After


@pytest.mark.parametrize("name", sorted(KEYS))
def test_python_and_lua_buckets_decide_alike(
    name: str, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key, steps = KEYS[name], STEPS[name]
    lua = _redis(redis_url, key, steps, monkeypatch)
    local = _local(key, steps, monkeypatch)
    _same(local, lua, steps, "LocalLimiter")
    _same(_shared(key, steps, monkeypatch, tmp_path), lua, steps, "SharedLimiter")
    # The steps reach both decisions and all the figures, so the comparison above means something.
    assert any(o.error for o in lua) and any(o.error is None and o.wait == 0 for o in lua)
    assert len({round(o.tokens if key.tpm else o.requests, 6) for o in lua}) > 3
