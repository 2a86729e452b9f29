"""Per-key requests/min and tokens/min (429 + Retry-After), reserved up front and reconciled
with the real usage; the global in-flight cap (503); and limits shared by two gateways
through Redis."""

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from service.auth import ApiKey
from service.metrics import Metrics
from service.redis_limits import RedisLimiter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        **extra,
    }


def _post(gateway: Any, secret: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def test_rpm_and_tpm(start_upstream: Any, start_gateway: Any, keys: Any) -> None:
    upstream = start_upstream()
    by_requests = keys.create("rpm3", rpm=3)
    by_tokens = keys.create("tpm1000", tpm=1000)
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )

    assert [_post(gateway, by_requests, _chat(1)).status_code for _ in range(3)] == [200] * 3
    resp = _post(gateway, by_requests, _chat(1))
    assert resp.status_code == 429
    assert int(resp.headers["Retry-After"]) >= 1
    assert resp.json()["error"]["code"] == "rate_limit_exceeded"

    # 600 tokens reserved, ~10 used: reconciliation gives the rest back, so a second and a
    # third request of the same size fit...
    for _ in range(3):
        assert _post(gateway, by_tokens, _chat(600)).status_code == 200
    # ...while one that really uses its tokens (the fake engine ignores max_tokens when told
    # how many chunks to send) exhausts the bucket.
    assert _post(gateway, by_tokens, _chat(900, x_fake={"chunks": 900})).status_code == 200
    resp = _post(gateway, by_tokens, _chat(600))
    assert resp.status_code == 429 and "Retry-After" in resp.headers


def test_in_flight_cap(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream("--delay-ms", "100")
    gateway = start_gateway(
        {
            "allow_anonymous": True,
            "limits": {"max_in_flight": 1},
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    slow = threading.Thread(
        target=httpx.post,
        args=(gateway.url + "/v1/chat/completions",),
        kwargs={"json": _chat(10, stream=True), "timeout": 30},
    )
    slow.start()
    deadline = time.monotonic() + 5
    while upstream.stats()["streams_started"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    start = time.monotonic()
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(1))
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
    assert resp.json()["error"]["code"] == "overloaded"
    assert time.monotonic() - start < 0.5
    slow.join()
    assert httpx.post(gateway.url + "/v1/chat/completions", json=_chat(1)).status_code == 200


def test_redis_limits_hold_across_two_gateways(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str
) -> None:
    upstream = start_upstream()
    secret = keys.create("shared", rpm=4)
    config = {
        "keys_file": str(keys.hosts_file),
        "limits": {"redis_url": redis_url},
        "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
    }
    first, second = start_gateway(config), start_gateway(config)
    statuses = [_post(gw, secret, _chat(1)).status_code for gw in (first, second) * 3]
    assert statuses == [200, 200, 200, 200, 429, 429]


def test_redis_limiter_reserves_and_reconciles(redis_url: str) -> None:
    key = ApiKey(name="unit-tpm", digest=b"", tpm=600, rpm=100)

    async def run() -> list[float]:
        limiter = RedisLimiter(redis_url, Metrics())
        waits = [await limiter.reserve(key, 400), await limiter.reserve(key, 400)]
        await limiter.adjust(key, 350)  # the first used 50 of its 400
        waits.append(await limiter.reserve(key, 400))
        await limiter.close()
        return waits

    first, refused, after_refund = asyncio.run(run())
    assert first == 0 and refused > 0 and after_refund == 0
    # 200 tokens short at 600/min: about 20 s to wait
    assert 15 < refused < 21


def test_redis_down_fails_open() -> None:
    metrics = Metrics()
    limiter = RedisLimiter("redis://127.0.0.1:1/0", metrics)
    key = ApiKey(name="k", digest=b"", rpm=1)
    assert asyncio.run(limiter.reserve(key, 10)) == 0
    assert metrics.limiter_errors._value.get() == 1
