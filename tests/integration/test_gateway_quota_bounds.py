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

from installer.flows.usage import rows
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
            "max_tokens": 4000, "x_fake": {"chunks": 5000, "delay_ms": 2}}
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
    # charged what it read, not the reservation it was admitted with
    assert _quota_used(config, name) == row["prompt_tokens"] + row["completion_tokens"] < 4000


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


def test_requests_without_max_tokens_are_capped_to_the_reservation(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    """A request that sets no max_tokens is sent with max_tokens = its reservation: uncapped, one
    request was charged 5,005 tokens of a 2,000-token quota, and 20 at once 3,976."""
    upstream, gateway, name, secret = _setup(start_upstream, start_gateway, keys, redis_url, 2000)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}],
            "x_fake": {"chunks": 5000}}  # the engine would generate 5,000 tokens if let
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {secret}"})
    assert resp.status_code == 200, resp.text
    sent = json.loads(upstream.stats()["last_body"])
    assert sent["max_tokens"] == 1024  # the default reserve, what the quota reserved
    config = tmp_path / "gateway-0.yaml"
    assert _quota_used(config, name) <= 2000

    other = f"q-{secrets.token_hex(3)}"
    other_secret = keys.create(other, quota_tokens=2000, quota_period="day")
    time.sleep(1.5)  # the gateway reloads its keys each second

    def post(n: int) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json={**body, "stream": n % 2 == 1}, timeout=60,
                          headers={"Authorization": f"Bearer {other_secret}"})

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(post, range(20)))
    assert {r.status_code for r in answers} == {200, 429}, {r.status_code for r in answers}
    [row] = [r for r in rows(usage_report(config), ("key",)) if r["key"] == other]
    # the fake engine counts a prompt below the gateway's estimate: not a token over
    assert row["prompt_tokens"] + row["completion_tokens"] == _quota_used(config, other) <= 2000


def test_a_client_that_leaves_before_the_first_byte_is_charged_the_prompt(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    """The engine had the request (prefill, maybe decode) when the client left: the prompt's
    estimate is charged and the request recorded as cut, not free."""
    _, gateway, name, secret = _setup(start_upstream, start_gateway, keys, redis_url, 1_000_000, "month")
    prompt = "tell me everything " * 30
    for stream in (False, True):
        body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 50,
                "stream": stream, "x_fake": {"stall_s": 5}}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=0.8,
                       headers={"Authorization": f"Bearer {secret}"})
    config = tmp_path / "gateway-0.yaml"
    deadline = time.monotonic() + 20
    while True:
        found = [r for r in rows(usage_report(config), ("key",)) if r["key"] == name]
        if found and found[0]["requests"] == 2:
            break
        assert time.monotonic() < deadline, f"the abandoned requests were not recorded: {found}"
        time.sleep(0.2)
    [row] = found
    estimate = len(prompt) // 3 + 1 + 4
    assert row["cut_requests"] == 2 and row["prompt_tokens"] == 2 * estimate and row["completion_tokens"] == 0
    assert _quota_used(config, name) == 2 * estimate


def test_the_max_tokens_the_gateway_sets_fits_the_engines_context(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str
) -> None:
    """vLLM refuses (400) a request whose prompt plus max_tokens passes its context: a cap the
    client never asked for must leave room for the prompt; one the client set is theirs."""
    upstream = start_upstream(model="tiny")
    secret = keys.create(f"q-{secrets.token_hex(3)}", quota_tokens=100_000, quota_period="day")
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file), "limits": {"redis_url": redis_url},
        "engines": [{"name": "e", "url": upstream.url, "model": "tiny", "max_model_len": 600}],
    })
    prompt = "word " * 300  # 1,500 characters: 501 estimated, + 4 for the message
    for asked, sent in ((None, 600 - 505), (50, 50)):
        body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}],
                **({"max_tokens": asked} if asked else {})}
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {secret}"})
        assert resp.status_code == 200, resp.text
        assert json.loads(upstream.stats()["last_body"])["max_tokens"] == sent
