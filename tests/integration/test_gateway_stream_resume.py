"""Mid-stream failover (service/stream_resume.py) through the real gateway and two fake engines
(benchmarks/fake_upstream.py) whose answers are deterministic, as greedy decoding is: an engine
that drops its stream after a few tokens is replaced by the other, and the client's one stream
carries the text, id, created and usage that one engine alone would have sent. Where it may not
resume (n > 1, logprobs, the model's switch off, the second engine dying too) the stream ends
with the error event and the access log says why; a client that leaves during the resumption
makes the gateway drop the second engine's stream."""

import json
import time
from typing import Any

import httpx
import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PATHS = ("/v1/chat/completions", "/v1/completions")


@pytest.fixture
def setup(start_upstream: Any, start_gateway: Any, keys: Any, scrape_token: Any) -> tuple[Any, list[Any], str]:
    """One gateway for every case (starting one takes seconds): model tiny on two engines, model
    off on the same two with resumption off, and model solo on one engine only."""
    engines = [start_upstream("--role-chunk", "--model", "off", "--model", "solo", "--model", "think",
                              "--model", "r1") for _ in range(2)]
    secret = keys.create("app", tpm=1_000_000)  # a tpm limit: the usage is settled at the end
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "metrics_token_file": str(scrape_token.file),
        "health_interval_s": 0.2,  # an engine that broke off is back in rotation at its next check
        "engines": [
            *({"name": f"e{i}", "url": e.url, "model": "tiny"} for i, e in enumerate(engines)),
            *({"name": f"off{i}", "url": e.url, "model": "off", "resume_streams": False}
              for i, e in enumerate(engines)),
            {"name": "solo", "url": engines[0].url, "model": "solo"},
            # reasoning resumed per family (service/resume_families.py)
            *({"name": f"think{i}", "url": e.url, "model": "think", "resume_family": "deepseek-v3-switch"}
              for i, e in enumerate(engines)),
            *({"name": f"r1-{i}", "url": e.url, "model": "r1", "resume_family": "deepseek-r1"}
              for i, e in enumerate(engines)),
        ],
    })
    return gateway, engines, secret


def _body(path: str, model: str = "tiny", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "stream": True, **extra}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    return body


def _stream(gateway: Any, secret: str, path: str, body: dict[str, Any]) -> list[Any]:
    """The stream's events: parsed objects, then "[DONE]" if it came."""
    with httpx.stream(
        "POST", gateway.url + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    ) as resp:
        assert resp.status_code == 200, resp.read()
        return [
            line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            for line in resp.iter_lines()
            if line.startswith("data: ")
        ]


def _text(events: list[Any]) -> str:
    out = []
    for e in events:
        for c in e.get("choices", ()) if isinstance(e, dict) else ():
            out.append((c.get("delta") or {}).get("content") or c.get("text") or "")
    return "".join(out)


def _fields(events: list[Any]) -> dict[str, Any]:
    """A chat stream's reasoning, content and tool-call deltas, each joined as a client would."""
    out: dict[str, Any] = {"reasoning": "", "content": "", "tool_calls": []}
    for e in events:
        for c in e.get("choices", ()) if isinstance(e, dict) else ():
            delta = c.get("delta") or {}
            out["reasoning"] += delta.get("reasoning_content") or ""
            out["content"] += delta.get("content") or ""
            out["tool_calls"] += delta.get("tool_calls") or []
    return out


def _both_ready(gateway: Any, scrape_token: Any) -> None:
    """An engine that broke off is out of rotation until its next check passes (0.5 s apart)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        engines = httpx.get(gateway.url + "/readyz", headers=scrape_token.headers).json().get("engines", {})
        if engines and all(engines.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"engines not both ready: {engines}")


def _resumed_metric(gateway: Any, scrape_token: Any, outcome: str) -> float:
    text = httpx.get(gateway.url + "/metrics", headers=scrape_token.headers).text
    for line in text.splitlines():
        if line.startswith("pli_gateway_stream_resumed_total{") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_stream_whose_engine_dies_goes_on_from_the_other_as_one_engine_would_answer(
    setup: tuple[Any, list[Any], str], scrape_token: Any
) -> None:
    gateway, engines, secret = setup
    for path in PATHS:
        extras: list[dict[str, Any]] = [{}, {"max_tokens": 12, "stream_options": {"include_usage": True}}]
        for extra in extras:
            whole = _stream(gateway, secret, path, _body(path, **extra))
            _both_ready(gateway, scrape_token)
            resumed = _stream(gateway, secret, path, _body(path, x_fake={"die_after": 5}, **extra))
            case = (path, extra)
            assert _text(resumed) == _text(whole) and _text(whole).startswith(" tok0 tok1"), case
            assert resumed[-1] == "[DONE]", case
            objs = [e for e in resumed if isinstance(e, dict)]
            assert "error" not in json.dumps(objs), case
            # One stream: the first engine's id and created on every chunk, the role once.
            assert {(e["id"], e["created"]) for e in objs} == {(objs[0]["id"], objs[0]["created"])}, case
            assert sum("role" in (c.get("delta") or {}) for e in objs for c in e["choices"]) == (
                1 if path.endswith("chat/completions") else 0
            ), case
            # The same finish_reason, and usage only where the client asked for it, covering the
            # prompt once and every completion token.
            finishes = [c["finish_reason"] for e in objs for c in e["choices"] if c["finish_reason"]]
            assert finishes == [c["finish_reason"] for e in whole if isinstance(e, dict)
                                for c in e["choices"] if c["finish_reason"]], case
            usages = [e["usage"] for e in objs if e.get("usage")]
            assert usages == [e["usage"] for e in whole if isinstance(e, dict) and e.get("usage")], case
            assert len(usages) == (1 if "stream_options" in extra else 0), case
            records = gateway.log_records()
            assert records[-1]["resume"] == "resumed" and records[-1]["attempts"] == 2, records[-1]
            # Charged and recorded once: the same tokens as the answer of one engine.
            assert (records[-1]["prompt_tokens"], records[-1]["completion_tokens"]) == (
                records[-2]["prompt_tokens"], records[-2]["completion_tokens"]
            ), case
            assert records[-2]["resume"] is None, case
            _both_ready(gateway, scrape_token)

    assert sum(u.stats()["continuations"] for u in engines) == 4
    assert sum(u.stats()["streams_died"] for u in engines) == 4
    sent = [json.loads(s["last_continuation"]) for s in (u.stats() for u in engines) if s["last_continuation"]]
    # The last completion's continuation, on whichever engine took it over: the text so far after
    # the prompt, max_tokens less the 5 tokens sent, and the usage of every chunk asked for.
    assert {"prompt": "hi tok0 tok1 tok2 tok3 tok4", "max_tokens": 12 - 5,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}.items() <= max(
        sent, key=lambda b: b.get("max_tokens") == 7 and "prompt" in b).items()
    assert _resumed_metric(gateway, scrape_token, "resumed") == 4

    # The openai client sees one stream, with the usage it asked for only at its end.
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    chunks = list(client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=9,
        stream_options={"include_usage": True}, extra_body={"x_fake": {"die_after": 4}},
    ))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(
        f" tok{i}" for i in range(9)
    )
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9
    assert all(c.usage is None for c in chunks[:-1])
    assert gateway.log_records()[-1]["resume"] == "resumed"


def test_streams_that_may_not_or_cannot_resume_end_with_the_error_event(
    setup: tuple[Any, list[Any], str], scrape_token: Any
) -> None:
    gateway, engines, secret = setup
    chat, completions = PATHS
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        (chat, "tiny", {"n": 2}, "n"),
        (chat, "tiny", {"logprobs": True}, "logprobs"),
        (completions, "tiny", {"logprobs": 1}, "logprobs"),
        (chat, "off", {}, "off"),
        (completions, "off", {}, "off"),
        (chat, "solo", {}, "no_engine"),
    ]
    for path, model, extra, reason in cases:
        events = _stream(gateway, secret, path, _body(path, model, x_fake={"die_after": 3}, **extra))
        assert "error" in events[-1] and _text(events) == " tok0 tok1 tok2", (model, extra)
        record = gateway.log_records()[-1]
        assert (record["resume"], record["error"]) == (reason, "upstream_stream_broken"), (model, extra)
        if reason == "off":  # nothing asked the engine for usage in every chunk either
            assert "continuous_usage_stats" not in record_body(engines, model)
        _both_ready(gateway, scrape_token)
    assert sum(u.stats()["continuations"] for u in engines) == 0
    assert [_resumed_metric(gateway, scrape_token, r) for r in ("n", "logprobs", "off", "no_engine")] == [1, 2, 2, 1]

    # The second engine dies too: the error event, without a hang.
    started = time.monotonic()
    events = _stream(gateway, secret, completions, _body(completions, x_fake={"die_after": 3, "die_resumed_after": 2}))
    assert time.monotonic() - started < 10
    assert "error" in events[-1] and "resum" in events[-1]["error"]["message"]
    assert _text(events) == " tok0 tok1 tok2 tok3 tok4"
    record = gateway.log_records()[-1]
    assert (record["resume"], record["error"], record["attempts"]) == ("failed", "upstream_stream_broken", 2)
    assert _resumed_metric(gateway, scrape_token, "failed") == 1
    _both_ready(gateway, scrape_token)

    # The client leaves while the second engine is answering: the gateway drops its stream.
    aborted = sum(u.stats()["streams_aborted"] for u in engines)
    body = _body(chat, x_fake={"die_after": 3, "stall_resumed_s": 30})
    with httpx.stream(
        "POST", gateway.url + chat, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    ) as resp:
        lines = resp.iter_lines()
        tokens = 0
        while tokens < 3:
            tokens += '" tok' in next(lines)
        deadline = time.monotonic() + 10
        while sum(u.stats()["continuations"] for u in engines) < 2:
            assert time.monotonic() < deadline, "the second engine was never asked"
            time.sleep(0.05)
    deadline = time.monotonic() + 10
    while sum(u.stats()["streams_aborted"] for u in engines) <= aborted:
        assert time.monotonic() < deadline, [u.stats() for u in engines]
        time.sleep(0.05)
    record = gateway.log_records()[-1]
    assert (record["resume"], record["error"]) == ("client_disconnected", "client_disconnected")
    assert _resumed_metric(gateway, scrape_token, "client_disconnected") == 1


def record_body(engines: list[Any], model: str) -> str:
    """The last streamed request for `model` that an engine let die."""
    bodies = [u.stats()["last_died"] for u in engines]
    return next(b for b in bodies if b and json.loads(b)["model"] == model)


THINK: dict[str, Any] = {
    "chat_template_kwargs": {"thinking": True}, "max_tokens": 14, "stream_options": {"include_usage": True},
}


def test_reasoning_answers_go_on_as_reasoning_then_content_per_family(
    setup: tuple[Any, list[Any], str], scrape_token: Any
) -> None:
    """A thinking answer (6 reasoning tokens, `</think>`, content) cut mid-reasoning and
    mid-content: the client's reasoning and content equal one engine's, and so does the usage."""
    gateway, engines, secret = setup
    chat = PATHS[0]
    for model in ("think", "r1"):
        whole = _stream(gateway, secret, chat, _body(chat, model, x_fake={"think": 6}, **THINK))
        assert _fields(whole)["reasoning"] == "".join(f" tok{i}" for i in range(6))
        assert _fields(whole)["content"] == "".join(f" tok{i}" for i in range(7, 14))
        _both_ready(gateway, scrape_token)
        resumed = _stream(gateway, secret, chat, _body(chat, model, x_fake={"think": 6, "die_after": 3}, **THINK))
        assert _fields(resumed) == _fields(whole) and resumed[-1] == "[DONE]", model
        assert [e["usage"] for e in resumed if isinstance(e, dict) and e.get("usage")] == [
            e["usage"] for e in whole if isinstance(e, dict) and e.get("usage")]
        record = gateway.log_records()[-1]
        assert (record["resume"], record["attempts"], record["completion_tokens"]) == ("resumed", 2, 14), record
        # The continuation: the thinking block's opening and the reasoning so far, thinking still on.
        sent = json.loads(_last_continuation(engines))
        assert sent["messages"][-1] == {"role": "assistant", "content": "<think>\n tok0 tok1 tok2"}
        assert sent["chat_template_kwargs"] == {"thinking": True} and sent["max_tokens"] == 14 - 3
        _both_ready(gateway, scrape_token)

    # Cut in the content (6 reasoning events, then tok7 and tok8): the switched family goes on
    # from the content alone with thinking off, and the rest is content.
    resumed = _stream(gateway, secret, chat, _body(chat, "think", x_fake={"think": 6, "die_after": 8}, **THINK))
    assert _fields(resumed) == _fields(whole) and resumed[-1] == "[DONE]"
    sent = json.loads(_last_continuation(engines))
    assert sent["messages"][-1] == {"role": "assistant", "content": " tok7 tok8"}
    assert sent["chat_template_kwargs"] == {"thinking": False, "enable_thinking": False}
    assert sent["max_tokens"] == 14 - 9  # the `</think>` token counted too
    assert gateway.log_records()[-1]["resume"] == "resumed"
    _both_ready(gateway, scrape_token)

    # deepseek_r1's parser has no switch: refused, and the error event says why.
    events = _stream(gateway, secret, chat, _body(chat, "r1", x_fake={"think": 6, "die_after": 8}, **THINK))
    assert "error" in events[-1] and "drops the reasoning" in events[-1]["error"]["message"]
    assert _fields(events)["content"] == " tok7 tok8"
    assert gateway.log_records()[-1]["resume"] == "reasoning_then_content"
    _both_ready(gateway, scrape_token)

    # A model with no family: any reasoning is refused, as before.
    events = _stream(gateway, secret, chat, _body(chat, x_fake={"think": 6, "die_after": 3}, **THINK))
    assert "error" in events[-1] and "no way of continuing" in events[-1]["error"]["message"]
    assert gateway.log_records()[-1]["resume"] == "reasoning"
    assert [_resumed_metric(gateway, scrape_token, r) for r in ("reasoning_then_content", "reasoning")] == [1, 1]


def test_a_tool_call_not_yet_streamed_comes_whole_and_one_being_streamed_is_refused(
    setup: tuple[Any, list[Any], str], scrape_token: Any
) -> None:
    gateway, _, secret = setup
    chat = PATHS[0]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    fake = {"tool_call_at": 4}
    whole = _stream(gateway, secret, chat, _body(chat, "think", tools=tools, x_fake=fake))
    assert _fields(whole)["content"] == " tok0 tok1 tok2 tok3" and len(_fields(whole)["tool_calls"]) == 2
    _both_ready(gateway, scrape_token)
    resumed = _stream(gateway, secret, chat, _body(chat, "think", tools=tools, x_fake={**fake, "die_after": 2}))
    assert _fields(resumed) == _fields(whole) and resumed[-1] == "[DONE]"
    finishes = [c["finish_reason"] for e in resumed if isinstance(e, dict) for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["tool_calls"] and gateway.log_records()[-1]["resume"] == "resumed"
    _both_ready(gateway, scrape_token)

    events = _stream(gateway, secret, chat, _body(chat, "think", tools=tools, x_fake={**fake, "die_after": 5}))
    assert "error" in events[-1] and "tool call" in events[-1]["error"]["message"]
    assert len(_fields(events)["tool_calls"]) == 1  # the call's first delta, then the error event
    assert gateway.log_records()[-1]["resume"] == "tool_call"
    assert _resumed_metric(gateway, scrape_token, "tool_call") == 1


def _last_continuation(engines: list[Any]) -> str:
    """The continuation an engine took last (the other engine's, if any, is older)."""
    stats = [u.stats() for u in engines]
    return max((s for s in stats if s["last_continuation"]), key=lambda s: s["last_continuation_at"])[
        "last_continuation"]
