"""The gateway speaks the OpenAI API: the official client works through it, sync, async and
streaming, and every error has OpenAI's body."""

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def setup(start_upstream, start_gateway, keys: Any) -> Any:
    upstream = start_upstream()
    embedder = start_upstream(model="embedder")
    secret = keys.create("app")
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "health_interval_s": 60,  # no readiness probe lands in the engine's request count
            "limits": {"max_body_bytes": 64 * 1024},
            "engines": [
                {"name": "e1", "url": upstream.url, "model": "tiny"},
                {"name": "emb", "url": embedder.url, "model": "embedder", "task": "embed"},
            ],
        }
    )
    return gateway, upstream, secret


def test_official_client_sync_stream_and_models(setup: Any) -> None:
    gateway, upstream, secret = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret)

    assert sorted(m.id for m in client.models.list()) == ["embedder", "tiny"]

    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert chat.choices[0].message.content == " tok0 tok1 tok2 tok3"
    assert chat.usage is not None and chat.usage.completion_tokens == 4

    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == " tok0 tok1 tok2 tok3 tok4"
    # The gateway asked the engine for usage (to account tokens), in every chunk too (to resume
    # the stream on another engine, service/stream_resume.py), but the client did not: hidden.
    assert all(c.usage is None and c.choices for c in chunks)
    assert json.loads(upstream.stats()["last_body"])["stream_options"] == {
        "include_usage": True, "continuous_usage_stats": True}

    completions = list(
        client.completions.create(
            model="tiny",
            prompt="a b c",
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert completions[-1].usage is not None and completions[-1].usage.completion_tokens == 3
    assert completions[-1].usage.prompt_tokens == 3

    emb = client.embeddings.create(model="embedder", input=["x", "y"])
    assert len(emb.data) == 2


def test_official_client_async_stream(setup: Any) -> None:
    gateway, _, secret = setup

    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=secret)
        streams = [
            await client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=3,
                stream=True,
            )
            for _ in range(4)
        ]

        async def text(stream: openai.AsyncStream) -> str:  # type: ignore[type-arg]
            return "".join([c.choices[0].delta.content or "" async for c in stream])

        return await asyncio.gather(*(text(s) for s in streams))

    assert asyncio.run(run()) == [" tok0 tok1 tok2"] * 4


def _error(resp: httpx.Response) -> dict[str, str]:
    body = resp.json()
    assert set(body) == {"error"} and {"message", "type", "code"} <= set(body["error"])
    return body["error"]


def test_errors_have_the_openai_body(setup: Any) -> None:
    gateway, upstream, secret = setup
    auth = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    url = gateway.url + "/v1/chat/completions"
    requests_before = upstream.stats()["requests"]

    resp = httpx.post(
        url, headers=auth, json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    )
    assert resp.status_code == 404 and _error(resp)["code"] == "model_not_found"

    resp = httpx.post(url, headers=auth, content=b'{"model": "tiny", "messages": [')
    assert resp.status_code == 400 and "not valid JSON" in _error(resp)["message"]

    for wrong in (
        {"model": 5, "messages": [{"role": "user", "content": "x"}]},
        {"model": "tiny", "messages": "x"},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"},
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
        {"model": "tiny"},
    ):
        resp = httpx.post(url, headers=auth, json=wrong)
        assert resp.status_code == 400, wrong
        assert _error(resp)["type"] == "invalid_request_error"

    big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 70_000}]}
    resp = httpx.post(url, headers=auth, json=big)
    assert resp.status_code == 413 and _error(resp)["code"] == "request_too_large"

    def chunked():  # no Content-Length: the limit holds while reading
        yield json.dumps(big).encode()

    resp = httpx.post(url, headers=auth, content=chunked())
    assert resp.status_code == 413

    resp = httpx.get(gateway.url + "/v1/nothing", headers=auth)
    assert resp.status_code == 404 and _error(resp)

    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}]
        )
    assert upstream.stats()["requests"] == requests_before  # none of these reached the engine
