"""Probes, graceful drain on SIGTERM (the real `python -m service` process), and metrics."""

import signal
import threading
import time
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _chat(max_tokens: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        **extra,
    }


def _stream_in_thread(
    url: str, body: dict[str, Any], out: list[str], first: threading.Event
) -> threading.Thread:
    def run() -> None:
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        out.append(line[6:])
                        first.set()
        except httpx.RemoteProtocolError:
            out.append("<cut>")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_sigterm_drains_streams_then_exits(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream("--delay-ms", "100")
    gateway = start_gateway(
        {
            "allow_anonymous": True,
            "drain_timeout_s": 20,
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    assert httpx.get(gateway.url + "/startupz").status_code == 200
    events: list[str] = []
    first = threading.Event()
    thread = _stream_in_thread(
        gateway.url, _chat(20, stream=True, x_fake={"chunks": 20}), events, first
    )
    assert first.wait(10)

    gateway.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    refused = httpx.post(gateway.url + "/v1/chat/completions", json=_chat())
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
    assert gateway.proc.poll() is None  # still serving the stream

    thread.join(30)
    assert events[-1] == "[DONE]" and len(events) == 21
    gateway.proc.wait(10)  # exits once the stream is done


def test_drain_timeout_cuts_what_is_left(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream("--delay-ms", "100")
    gateway = start_gateway(
        {
            "allow_anonymous": True,
            "drain_timeout_s": 1,
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    events: list[str] = []
    first = threading.Event()
    thread = _stream_in_thread(
        gateway.url, _chat(100, stream=True, x_fake={"chunks": 100}), events, first
    )
    assert first.wait(10)
    start = time.monotonic()
    gateway.proc.send_signal(signal.SIGTERM)
    gateway.proc.wait(10)
    assert time.monotonic() - start < 4
    thread.join(10)
    assert events[-1] == "<cut>"


def test_metrics(start_upstream: Any, start_gateway: Any, keys: Any, scrape_token: Any) -> None:
    upstream = start_upstream()
    secret = keys.create("metered")
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "metrics_token_file": str(scrape_token.file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    auth = {"Authorization": f"Bearer {secret}"}
    httpx.post(gateway.url + "/v1/chat/completions", json=_chat(5, stream=True), headers=auth)
    httpx.post(gateway.url + "/v1/chat/completions", json=_chat(3), headers=auth)
    httpx.post(gateway.url + "/v1/chat/completions", json=_chat(3))
    text = httpx.get(gateway.url + "/metrics", headers=scrape_token.headers).text  # Prometheus's token, no API key
    for line in (
        'pli_gateway_requests_total{key="metered",model="tiny",status="200"} 2.0',
        'pli_gateway_requests_total{key="-",model="-",status="401"} 1.0',
        'pli_gateway_completion_tokens_total{key="metered",model="tiny"} 8.0',
        'pli_gateway_time_to_first_token_seconds_count{model="tiny"} 1.0',
        'pli_gateway_inter_token_latency_seconds_count{model="tiny"}',
        'pli_gateway_engine_healthy{engine="e1",model="tiny"} 1.0',
        "pli_gateway_in_flight_requests 0.0",
    ):
        assert line in text, line


def test_metrics_on_an_internal_address(start_upstream: Any, start_gateway: Any) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    upstream = start_upstream()
    gateway = start_gateway(
        {
            "allow_anonymous": True,
            "metrics_host": "127.0.0.1",
            "metrics_port": port,
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    assert httpx.get(gateway.url + "/metrics").status_code == 404
    assert "pli_gateway_in_flight_requests" in httpx.get(f"http://127.0.0.1:{port}/metrics").text
