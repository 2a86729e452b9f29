"""Relay helpers: engine errors in OpenAI's shape, and usage taken from a stream."""

import json
from typing import Any

from service.accesslog import RequestInfo
from service.proxy import ProxyCall, normalize_error


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
