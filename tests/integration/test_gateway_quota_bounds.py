"""What a request is charged when it does not end well, and how far concurrent requests can take
a key past its quota (service/usage.py, service/redis_usage.py, service/proxy.py): real gateways
(uvicorn), the fake engine and a real redis-server; read back as `installer usage` reads it."""

import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from installer.usage import rows
from tests.support.usage_report import usage_report

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]




def _setup(start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, quota: int,
           period: str = "day") -> tuple[Any, Any, str, str]:
    upstream = start_upstream(model="tiny")
    name = f"q-{secrets.token_hex(3)}"
    secret = keys.create(name, quota_tokens=quota, quota_period=period)
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file), "limits": {"redis_url": redis_url},
        "engines": [{"name": "e", "url": upstream.url, "model": "tiny"}],
    })
    return upstream, gateway, name, secret


def _quota_used(config: Path, name: str) -> int:
    return int({q["key"]: q for q in usage_report(config).quotas}[name]["used"])


def test_a_stream_cut_by_its_client_is_charged_and_recorded_for_what_it_read(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    _, gateway, name, secret = _setup(start_upstream, start_gateway, keys, redis_url, 1_000_000, "month")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "write a long story"}], "stream": True,
            "x_fake": {"chunks": 5000, "delay_ms": 2}}  # no max_tokens: 1024 reserved
    read = 0
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {secret}"}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            read += line.startswith("data: {")
            if read == 1500:  # more than the reservation, then the client leaves before [DONE]
                break
    config = tmp_path / "gateway-0.yaml"
    deadline = time.monotonic() + 20
    while not [r for r in rows(usage_report(config), ("key",)) if r["key"] == name]:
        assert time.monotonic() < deadline, "the cut stream was never recorded"
        time.sleep(0.2)
    [row] = [r for r in rows(usage_report(config), ("key",)) if r["key"] == name]
    assert row["requests"] == 1 and row["cut_requests"] == 1
    assert row["completion_tokens"] >= read
    # charged what it read, beyond the reservation it was admitted with
    assert _quota_used(config, name) == row["prompt_tokens"] + row["completion_tokens"] > 1024 + row["prompt_tokens"]


def test_an_engine_refusal_is_charged_nothing(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    _, gateway, name, secret = _setup(start_upstream, start_gateway, keys, redis_url, 1_000_000, "month")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 150_000,
            "x_fake": {"status": 400, "body": {"error": {"message": "max_tokens is too large", "code": 400}}}}
    for stream in (False, True):
        resp = httpx.post(gateway.url + "/v1/chat/completions", json={**body, "stream": stream}, timeout=30,
                          headers={"Authorization": f"Bearer {secret}"})
        assert resp.status_code == 400, resp.text
    time.sleep(0.5)  # settled after the response is sent
    config = tmp_path / "gateway-0.yaml"
    assert _quota_used(config, name) == 0
    assert not [r for r in rows(usage_report(config), ("key",)) if r["key"] == name]


def test_concurrent_requests_never_reserve_more_than_the_quota(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    upstream, gateway, name, secret = _setup(start_upstream, start_gateway, keys, redis_url, 300)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 100,
            "x_fake": {"chunks": 200, "delay_ms": 5}}  # 100 tokens each, unless capped

    def post(n: int) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json={**body, "stream": n % 2 == 1}, timeout=60,
                          headers={"Authorization": f"Bearer {secret}"})

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(post, range(12)))
    statuses = sorted(r.status_code for r in answers)
    assert 200 in statuses and 429 in statuses and set(statuses) == {200, 429}
    config = tmp_path / "gateway-0.yaml"
    [row] = [r for r in rows(usage_report(config), ("key",)) if r["key"] == name]
    # the fake engine counts a prompt below the gateway's estimate, so nothing is over
    assert row["prompt_tokens"] + row["completion_tokens"] == _quota_used(config, name) <= 300

    # n choices each take max_tokens: what is left is split between them, and the engine is told
    other = keys.create(f"n-{secrets.token_hex(3)}", quota_tokens=100, quota_period="day")
    resp = httpx.post(gateway.url + "/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {other}"},
                      json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 3})
    if resp.status_code == 401:  # the gateway reloads its keys each second
        time.sleep(1.5)
        resp = httpx.post(gateway.url + "/v1/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {other}"},
                          json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 3})
    assert resp.status_code == 200, resp.text
    sent = json.loads(httpx.get(upstream.url + "/_stats").json()["last_body"])
    assert sent["n"] == 3 and sent["max_tokens"] == (100 - (len("hi") // 3 + 1 + 4)) // 3
