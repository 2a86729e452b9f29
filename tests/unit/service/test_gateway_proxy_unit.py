"""Relay helpers: engine errors in OpenAI's shape, and usage taken from a stream."""

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from service.accesslog import RequestInfo
from service.metrics import Metrics
from service.proxy import ProxyCall, Upstream, normalize_error
from service.routing import Engine


def test_normalize_error() -> None:
    openai_shaped = b'{"error": {"message": "m", "type": "t", "code": 1}}'
    assert normalize_error(400, openai_shaped) == openai_shaped
    old_vllm = json.loads(
        normalize_error(
            400, b'{"object": "error", "message": "too long", "type": "BadRequestError"}'
        )
    )
    assert (
        old_vllm["error"]["message"] == "too long"
        and old_vllm["error"]["type"] == "BadRequestError"
    )
    text = json.loads(normalize_error(502, b"<html>bad gateway</html>"))
    assert text["error"]["type"] == "server_error" and "bad gateway" in text["error"]["message"]


@pytest.mark.parametrize(
    ("status", "body", "message", "type_"),
    [
        (400, b'{"error": {"type": "BadRequestError"}}', '{"error": {"type": "BadRequestError"}}', "BadRequestError"),
        (400, b'{"error": {"message": 5, "type": null, "code": 400}}', '{"error"', "invalid_request_error"),
        (500, b'{"error": "engine on fire"}', "engine on fire", "server_error"),
        (422, b'{"detail": [{"msg": "x"}]}', '{"detail"', "invalid_request_error"),
        (502, b"[1, 2]", "[1, 2]", "server_error"),
        (503, b"", "engine answered HTTP 503", "server_error"),
        (500, b"\xff\xfe", "\ufffd", "server_error"),
        (500, b"[" * 100_000, "[[[", "server_error"),  # deeper than the JSON parser goes
    ],
)
def test_normalize_error_of_any_shape(status: int, body: bytes, message: str, type_: str) -> None:
    error = json.loads(normalize_error(status, body))["error"]
    assert message in error["message"] and error["type"] == type_
    assert error["code"] is None or isinstance(error["code"], str)


def _call(strip: bool) -> ProxyCall:
    info = RequestInfo(request_id="r", start=0.0)
    return ProxyCall(None, info, None, "/v1/chat/completions", b"", "m", strip, 0, None)  # type: ignore[arg-type]


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_usage_taken_and_hidden_when_not_asked() -> None:
    token = _event({"choices": [{"delta": {"content": "x"}}]})
    usage = _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    block = token + usage + b"data: [DONE]\n\n"
    call = _call(strip=True)
    assert call._take_usage(block) == token + b"data: [DONE]\n\n"
    assert (call.info.prompt_tokens, call.info.completion_tokens) == (7, 3)
    assert _call(strip=False)._take_usage(block) == block


def test_usage_from_the_tail_of_a_body() -> None:
    body = json.dumps(
        {"data": [{"embedding": [0.1] * 1000}], "usage": {"prompt_tokens": 4, "total_tokens": 4}}
    )
    assert ProxyCall._tail_usage(body.encode()) == {"prompt_tokens": 4, "total_tokens": 4}
    assert ProxyCall._tail_usage(b'{"x": 1}') is None


class _Content:
    def __init__(self, *parts: bytes | Exception) -> None:
        self.parts = parts

    async def iter_any(self) -> Any:
        for part in self.parts:
            if isinstance(part, Exception):
                raise part
            yield part


class _Response:
    def __init__(self, *parts: bytes | Exception) -> None:
        self.content = _Content(*parts)


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        ((_event({"choices": []}), RuntimeError("a fault of the gateway's own")), "gateway_error"),
        ((_event({"choices": []}), aiohttp.ClientPayloadError("cut")), "upstream_stream_broken"),
        ((_event({"choices": []}), b'data: {"choi'), "upstream_stream_incomplete"),  # no [DONE]
    ],
)
def test_a_stream_cut_for_any_reason_ends_with_an_error_event(parts: tuple[Any, ...], reason: str) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    upstream = Upstream(None, None, None, Metrics(), None)  # type: ignore[arg-type]
    call = ProxyCall(upstream, RequestInfo("r", 0.0), None, "/v1/chat/completions", b"", "m", False, 0, None)  # type: ignore[arg-type]
    engine = Engine(name="e", url="http://127.0.0.1:1", model="m", task="generate")
    asyncio.run(call._relay_stream(_Response(*parts), engine, send, b"text/event-stream"))  # type: ignore[arg-type]
    last = sent[-1]
    assert last["type"] == "http.response.body" and not last.get("more_body")
    event = last["body"]
    assert event.startswith(b"data: {") and event.endswith(b"\n\n")
    assert json.loads(event[6:])["error"]["message"]  # what the openai client raises APIError on
    assert call.info.error == reason and call.done
