"""Routing over engines: least outstanding first, session affinity, one retry before the
first byte, an in-band error when an engine dies mid-stream, fast 503s when none is healthy,
and the engine's request closed when the client leaves."""

import json
import signal
import threading
import time
from typing import Any

import httpx
import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _chat(max_tokens: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        **extra,
    }


def _engines(*upstreams: Any) -> list[dict[str, str]]:
    return [{"name": f"e{i}", "url": u.url, "model": "tiny"} for i, u in enumerate(upstreams)]


def _until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_retry_before_first_byte(start_upstream: Any, start_gateway: Any) -> None:
    doomed, healthy = start_upstream(), start_upstream()
    # Checks far apart: the gateway learns of the death only by trying the engine.
    gateway = start_gateway(
        {"allow_anonymous": True, "health_interval_s": 60, "engines": _engines(doomed, healthy)}
    )
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    for _ in range(4):
        assert httpx.post(gateway.url + "/v1/chat/completions", json=_chat()).status_code == 200
    attempts = [(r["engine"], r["attempts"]) for r in gateway.log_records()]
    assert ("e1", 2) in attempts  # one request went to e0 first, failed, and was retried
    assert all(engine == "e1" for engine, _ in attempts)


def test_retried_once_then_502(start_upstream: Any, start_gateway: Any) -> None:
    a, b = start_upstream(), start_upstream()
    gateway = start_gateway({"allow_anonymous": True, "engines": _engines(a, b)})
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(x_fake={"status": 500}))
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"
    assert [r["attempts"] for r in gateway.log_records()] == [2]


def test_all_engines_down(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream()
    gateway = start_gateway({"allow_anonymous": True, "engines": _engines(upstream)})
    upstream.proc.send_signal(signal.SIGKILL)
    upstream.proc.wait()
    _until(lambda: httpx.get(gateway.url + "/readyz").status_code == 503)
    assert httpx.get(gateway.url + "/livez").status_code == 200
    start = time.monotonic()
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat())
    assert time.monotonic() - start < 0.5
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
    assert resp.json()["error"]["code"] == "no_healthy_engine"


def test_engine_killed_mid_stream(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream("--delay-ms", "50")
    gateway = start_gateway({"allow_anonymous": True, "engines": _engines(upstream)})
    events = []
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json=_chat(100, stream=True), timeout=10
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 3:
                    upstream.proc.send_signal(signal.SIGKILL)
    assert len(events) >= 4 and events[-1] != "[DONE]"
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_error" and error["type"] == "server_error"


def test_engine_killed_mid_stream_openai_client(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream("--delay-ms", "50")
    gateway = start_gateway({"allow_anonymous": True, "engines": _engines(upstream)})
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused")
    stream = client.chat.completions.create(**_chat(100, stream=True))
    received = 0
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        for _ in stream:
            received += 1
            if received == 2:
                upstream.proc.send_signal(signal.SIGKILL)
    assert received >= 2


def test_client_disconnect_closes_the_engine_request(
    start_upstream: Any, start_gateway: Any
) -> None:
    upstream = start_upstream("--delay-ms", "50")
    gateway = start_gateway({"allow_anonymous": True, "engines": _engines(upstream)})
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json=_chat(200, stream=True, x_fake={"chunks": 200}),
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                break
    _until(lambda: upstream.stats()["streams_aborted"] == 1, timeout=3)
    stats = upstream.stats()
    assert stats["streams_completed"] == 0
    assert gateway.log_records()[-1]["error"] == "client_disconnected"


def test_least_outstanding_and_affinity(start_upstream: Any, start_gateway: Any) -> None:
    a, b = start_upstream("--delay-ms", "30"), start_upstream("--delay-ms", "30")
    gateway = start_gateway(
        {"allow_anonymous": True, "session_header": "X-Session-Id", "engines": _engines(a, b)}
    )
    threads = [
        threading.Thread(
            target=httpx.post,
            args=(gateway.url + "/v1/chat/completions",),
            kwargs={"json": _chat(10, stream=True), "timeout": 30},
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (a.stats()["streams_started"], b.stats()["streams_started"]) == (2, 2)

    for session in ("alice", "bob", "carol"):
        for _ in range(3):
            assert (
                httpx.post(
                    gateway.url + "/v1/chat/completions",
                    json=_chat(),
                    headers={"X-Session-Id": session},
                ).status_code
                == 200
            )
    engines = [r["engine"] for r in gateway.log_records()[4:]]
    assert all(len(set(engines[i : i + 3])) == 1 for i in (0, 3, 6))


def test_upstream_timeout(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream()
    gateway = start_gateway(
        {
            "allow_anonymous": True,
            "limits": {"upstream_timeout_s": 0.3},
            "engines": _engines(upstream),
        }
    )
    slow = _chat(4, x_fake={"delay_ms": 200})  # 4 x 200 ms before the whole answer
    start = time.monotonic()
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=slow)
    assert resp.status_code == 504 and resp.json()["error"]["code"] == "upstream_timeout"
    assert time.monotonic() - start < 2
    # A stream whose tokens keep coming is not cut, however long it lasts.
    streamed = httpx.post(
        gateway.url + "/v1/chat/completions", json=_chat(4, stream=True, x_fake={"delay_ms": 200})
    )
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
