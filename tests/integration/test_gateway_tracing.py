"""Traces through the real gateway (`python -m service`, two workers) to a real OTLP/HTTP receiver
(tests/support/otlp_receiver.py, built on opentelemetry-proto: the OpenTelemetry Collector is not
installable here): a client's traceparent is the span's parent and reaches the engine as the
span's context, the span carries model, stage, key id and token counts, and the API key is in no
byte exported. Tracing off passes the client's headers through unchanged; a collector that is
down delays no request."""

import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.loopback import free_port
from tests.support.otlp_receiver import otlp_receiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CLOSE = {"Connection": "close"}  # new connections: both workers serve some


def _chat(stream: bool) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": stream}
    return {**body, "stream_options": {"include_usage": True}} if stream else body


def _usage(resp: httpx.Response) -> dict[str, int]:
    if not resp.headers["content-type"].startswith("text/event-stream"):
        return dict(resp.json()["usage"])
    events = [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")]
    return dict(next(e["usage"] for e in events if e.get("usage")))


def _gateway(start_gateway: Any, keys: Any, stable: Any, canary: Any, tmp_path: Path, **settings: Any) -> Any:
    stages = tmp_path / "stages.json"
    stages.write_text(json.dumps({"models": {"tiny": {"weights": {"stable": 0, "canary": 100}}}}))
    return start_gateway({
        "keys_file": str(keys.hosts_file), "workers": 2, "stages_file": str(stages),
        "engines": [
            {"name": "s1", "url": stable.url, "model": "tiny"},
            {"name": "s1-canary", "url": canary.url, "model": "tiny", "stage": "canary"},
        ],
        **settings,
    })


def _until_canary_serves(gateway: Any, headers: dict[str, str]) -> None:
    """/readyz needs one ready engine: wait until the canary is in rotation too (its first check)."""
    deadline = time.monotonic() + 15
    while True:
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(False), headers=headers)
        if resp.headers.get("x-release-stage") == "canary":
            return
        assert time.monotonic() < deadline, "the canary never served"
        time.sleep(0.2)


def _traces(receiver: Any, trace_ids: set[str], timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        with receiver.lock:
            found = {s.trace_id: s for s in receiver.spans if s.trace_id in trace_ids}
        if len(found) == len(trace_ids):
            return found
        assert time.monotonic() < deadline, f"spans of {trace_ids - set(found)} not received"
        time.sleep(0.05)


def test_spans_reach_the_collector_with_the_clients_trace_and_no_key(
    start_upstream: Any, start_gateway: Any, keys: Any, tmp_path: Path
) -> None:
    secret = keys.create("alice")
    stable, canary = start_upstream(), start_upstream()
    with otlp_receiver() as receiver:
        gateway = _gateway(
            start_gateway, keys, stable, canary, tmp_path,
            tracing={"otlp_endpoint": receiver.url, "schedule_delay_s": 0.1},
        )
        auth = {"Authorization": f"Bearer {secret}", **CLOSE}
        _until_canary_serves(gateway, auth)
        sent: dict[str, tuple[str, dict[str, int]]] = {}
        for stream in (False, True):
            trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
            headers = {**auth, "traceparent": f"00-{trace_id}-{parent}-01", "tracestate": "vendor=opaque"}
            resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(stream), headers=headers)
            assert resp.status_code == 200, resp.text
            # The engine got the gateway span's context: the client's trace, a new span id.
            seen = canary.stats()["last_trace_headers"]
            version, engine_trace, engine_parent, flags = seen["traceparent"].split("-")
            assert (version, engine_trace, flags) == ("00", trace_id, "01")
            assert engine_parent != parent
            assert seen["tracestate"] == "vendor=opaque"
            sent[trace_id] = (engine_parent, _usage(resp))
        # A request without one starts a trace of its own, which the engine continues.
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(False), headers=auth)
        assert resp.status_code == 200
        _, own_trace, own_span, _ = canary.stats()["last_trace_headers"]["traceparent"].split("-")

        spans = _traces(receiver, {*sent, own_trace})
        for trace_id, (engine_parent, usage) in sent.items():
            span = spans[trace_id]
            assert span.span_id == engine_parent  # the engine's parent is the gateway's span
            assert span.name == "POST /v1/chat/completions"
            assert span.attributes["gen_ai.request.model"] == "tiny"
            assert span.attributes["pli.release.stage"] == "canary"
            assert span.attributes["pli.key.id"] == "alice"
            assert span.attributes["pli.engine"] == "s1-canary"
            assert span.attributes["http.response.status_code"] == 200
            assert span.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
            assert span.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
            assert span.resource["service.name"] == "private-llm-gateway"
        assert spans[own_trace].span_id == own_span and spans[own_trace].parent_span_id == ""
        raw = receiver.raw()
        assert secret.encode() not in raw
        assert hashlib.sha256(secret.encode()).hexdigest().encode() not in raw
        assert hashlib.sha256(secret.encode()).digest() not in raw


def test_tracing_off_passes_the_clients_headers_through(
    start_upstream: Any, start_gateway: Any, keys: Any, tmp_path: Path
) -> None:
    secret = keys.create("bob")
    stable, canary = start_upstream(), start_upstream()
    gateway = _gateway(start_gateway, keys, stable, canary, tmp_path)
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    headers = {"Authorization": f"Bearer {secret}", "traceparent": traceparent, "tracestate": "a=b", **CLOSE}
    _until_canary_serves(gateway, headers)
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(True), headers=headers)
    assert resp.status_code == 200
    assert canary.stats()["last_trace_headers"] == {"traceparent": traceparent, "tracestate": "a=b"}
    resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(False), headers={**headers, "traceparent": ""})
    assert resp.status_code == 200


def test_a_collector_that_is_down_delays_no_request(
    start_upstream: Any, start_gateway: Any, keys: Any, tmp_path: Path
) -> None:
    secret = keys.create("carol")
    stable, canary = start_upstream(), start_upstream()
    nobody = f"http://127.0.0.1:{free_port()}"  # refuses every connection
    gateway = _gateway(
        start_gateway, keys, stable, canary, tmp_path,
        tracing={"otlp_endpoint": nobody, "schedule_delay_s": 0.05, "max_queue_size": 4},
    )
    auth = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(headers=auth) as client:
        worst = 0.0
        for _ in range(40):
            t0 = time.perf_counter()
            resp = client.post(gateway.url + "/v1/chat/completions", json=_chat(True))
            worst = max(worst, time.perf_counter() - t0)
            assert resp.status_code == 200
    # Exports fail and retry in the SDK's thread, and the queue overflows: requests never wait.
    assert worst < 1.0
