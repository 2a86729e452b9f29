"""Token-bucket arithmetic of the in-process limiter, and the prompt-size estimate."""

import asyncio

import pytest

from service.auth import ApiKey
from service.errors import GatewayError
from service.limits import LocalLimiter, estimate_chat_tokens, estimate_tokens, reserve_or_raise
from service.schemas import ChatMessage


def test_rpm_bucket() -> None:
    limiter, key = LocalLimiter(), ApiKey("k", b"", rpm=2)
    waits = [asyncio.run(limiter.reserve(key, 0)) for _ in range(3)]
    assert waits[:2] == [0, 0]
    assert 29 < waits[2] <= 30  # one request refills in 60/2 s


def test_tpm_reserve_adjust_and_clamp() -> None:
    limiter, key = LocalLimiter(), ApiKey("k", b"", tpm=1000)

    async def run() -> tuple[int, float, float]:
        # larger than the whole bucket: reserves the full bucket rather than never fitting
        reserved = await reserve_or_raise(limiter, key, 5000)
        refused = await limiter.reserve(key, 100)
        await limiter.adjust(key, 900)  # it used only 100
        return reserved, refused, await limiter.reserve(key, 800)

    reserved, refused, after = asyncio.run(run())
    assert reserved == 1000 and refused > 0 and after == 0


def test_429_has_retry_after() -> None:
    limiter, key = LocalLimiter(), ApiKey("k", b"", rpm=1)

    async def run() -> None:
        await reserve_or_raise(limiter, key, 1)
        await reserve_or_raise(limiter, key, 1)

    with pytest.raises(GatewayError) as info:
        asyncio.run(run())
    assert info.value.status == 429 and info.value.headers == {"Retry-After": "60"}


def test_unlimited_key_reserves_nothing() -> None:
    assert asyncio.run(reserve_or_raise(LocalLimiter(), ApiKey("k", b""), 10**9)) == 0


@pytest.mark.parametrize(
    ("value", "tokens"),
    [
        ("", 1),
        ("abcdef", 3),
        ([1, 2, 3], 3),
        ([[1, 2], [3]], 3),
        (["ab", "cd"], 2),
        ([{"type": "text", "text": "abcdef"}, {"type": "image_url", "image_url": {}}], 3 + 64),
    ],
)
def test_estimate(value: object, tokens: int) -> None:
    assert estimate_tokens(value) == tokens


def test_estimate_chat() -> None:
    assert estimate_chat_tokens([ChatMessage(role="user", content="abcdef")]) == 3 + 4
