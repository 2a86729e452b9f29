"""An engine that misbehaves (benchmarks/fake_upstream.py's x_fake faults) never makes the gateway
answer its own 500: error bodies of any shape become OpenAI errors, an answer that is not HTTP is
a 502, token counts that are not counts are dropped without losing the stream or its access-log
record, a stream cut short ends with an error event the openai client raises on, and a client
that leaves before a non-streamed answer is logged as 499, not 500."""

import json
import socket
import time
from typing import Any

import httpx
import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _chat(stream: bool = False, **fake: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": stream,
        "x_fake": fake,
    }


@pytest.fixture
def setup(start_upstream: Any, start_gateway: Any, keys: Any) -> tuple[Any, str]:
    upstream = start_upstream()
    secret = keys.create("app", tpm=1_000_000)  # a tpm limit: usage is reconciled at the end
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
    })
    return gateway, secret


def _post(gateway: Any, secret: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
    )


# One gateway for several cases: starting one takes seconds.
ERROR_BODIES = [
    {"error": {"type": "BadRequestError"}},  # no message
    {"error": {"message": 5, "type": None}},
    {"error": "plain text"},
    {"detail": [{"msg": "x"}]},
    [1, 2],
    None,
]


def test_error_bodies_of_any_shape_and_answers_that_are_not_http(setup: tuple[Any, str]) -> None:
    gateway, secret = setup
    for status in (400, 500):
        for body in ERROR_BODIES:
            resp = _post(gateway, secret, _chat(status=status, body=body))
            # A 4xx is the engine's answer to this request, relayed; a 5xx is retried, then a 502.
            assert resp.status_code == (400 if status == 400 else 502), (status, body, resp.text)
            error = resp.json()["error"]
            assert isinstance(error["message"], str) and error["message"], (status, body)
            assert isinstance(error["type"], str) and error["type"], (status, body)
            if body == {"error": "plain text"}:
                assert "plain text" in error["message"]

    resp = _post(gateway, secret, _chat(not_http=True))
    assert resp.status_code == 502, resp.text
    assert resp.json()["error"]["code"] == "upstream_error"
    assert "invalid response" in resp.json()["error"]["message"]

    assert _post(gateway, secret, _chat()).status_code == 200  # the engine is still in rotation
    assert [r["status"] for r in gateway.log_records()] == [400] * 6 + [502] * 7 + [200]


def test_usage_and_streams_that_misbehave(setup: tuple[Any, str]) -> None:
    gateway, secret = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)

    def create(stream: bool, **fake: Any) -> Any:
        body = _chat(stream, **fake)
        del body["x_fake"]  # the openai client sends unknown fields only as extra_body
        return client.chat.completions.create(**body, extra_body={"x_fake": fake})

    # Token counts that are not counts: the answer arrives whole and is logged, without them.
    usage = {"prompt_tokens": "7", "completion_tokens": 2.5, "total_tokens": [1]}
    chunks = list(create(True, usage=usage))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == " tok0 tok1 tok2 tok3"
    assert create(False, usage=usage).choices[0].message.content == " tok0 tok1 tok2 tok3"
    records = gateway.log_records()
    assert [(r["status"], r["stream"], r["error"]) for r in records] == [(200, True, None), (200, False, None)]
    assert all((r["prompt_tokens"], r["completion_tokens"]) == (None, None) for r in records)

    # An event that is not JSON is relayed as it came; the stream goes on to its end.
    body = _chat(True, tail=['data: {"usage": {"prompt_tokens": oops}}\n\n'])
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json=body,
        headers={"Authorization": f"Bearer {secret}"},
    ) as resp:
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and '{"usage": {"prompt_tokens": oops}}' in events
    assert gateway.log_records()[-1]["status"] == 200

    # A stream that ends without [DONE] ends with an error event: the openai client raises.
    received = []
    with pytest.raises(openai.APIError, match="ended the stream early"):
        for chunk in create(True, no_done=True):
            received.append(chunk)
    assert len(received) == 4  # the tokens got through; then the error, not a silent end
    record = gateway.log_records()[-1]
    assert (record["status"], record["error"]) == (200, "upstream_stream_incomplete")


def test_a_client_leaving_before_the_answer_is_a_499(setup: tuple[Any, str]) -> None:
    gateway, secret = setup
    body = json.dumps(_chat(delay_ms=500)).encode()  # 4 tokens: answered after 2 s
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {secret}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.5)
    time.sleep(0.5)
    record = gateway.log_records()[-1]
    assert (record["status"], record["error"]) == (499, "client_disconnected")
