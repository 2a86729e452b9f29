"""service/stream_resume.py's pure parts: which requests may resume, what a stream sent, the
continuation built from it, and the next engine's events rewritten into the client's stream."""

import json
from typing import Any

import pytest

from service.accesslog import RequestInfo
from service.schemas import ChatCompletionRequest, CompletionRequest
from service.stream_resume import StreamResume, _Rewriter, admit

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"


def _chat(**extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}], **extra})


def _text(prompt: Any = "hi", **extra: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "stream": True, "prompt": prompt, **extra})


@pytest.mark.parametrize(("path", "body", "enabled", "refusal"), [
    (CHAT, _chat(), True, None),
    (TEXT, _text(), True, None),
    (TEXT, _text(["one prompt"]), True, None),
    (CHAT, _chat(), False, "off"),
    (CHAT, _chat(n=2), True, "n"),
    (CHAT, _chat(logprobs=True, top_logprobs=2), True, "logprobs"),
    (TEXT, _text(logprobs=1), True, "logprobs"),
    (TEXT, _text(echo=True), True, "echo"),
    (TEXT, _text([1, 2, 3]), True, "prompt_not_text"),
    (TEXT, _text(["a", "b"]), True, "prompt_not_text"),
    (CHAT, _chat(continue_final_message=True), True, "client_continues"),
    (CHAT, _chat(response_format={"type": "json_object"}), True, "structured_output"),
    (CHAT, _chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}), True,
     "structured_output"),
    (CHAT, _chat(response_format={"type": "text"}), True, None),
    (TEXT, _text(guided_regex="[a-z]+"), True, "structured_output"),
    (CHAT, _chat(structured_outputs={"choice": ["a", "b"]}), True, "structured_output"),
])
def test_which_requests_may_resume(path: str, body: Any, enabled: bool, refusal: str | None) -> None:
    assert admit(path, body, enabled).refusal == refusal


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode()


def _chunk(delta: dict[str, Any], done: int, finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "total_tokens": 5 + done, "completion_tokens": done}}


def _block(*objs: dict[str, Any]) -> bytes:
    return b"".join(_event(o) + b"\n\n" for o in objs)


def test_what_a_chat_stream_sent_and_its_usage_taken_out_of_the_chunks() -> None:
    state = admit(CHAT, _chat(max_tokens=10), True)
    out = state.observe(_block(_chunk({"role": "assistant", "content": ""}, 0), _chunk({"content": " a"}, 1)))
    out += state.observe(_block(_chunk({"content": " b c"}, 3)))  # a chunk of several tokens (MTP)
    assert b'"usage"' not in out and out.count(b"data: ") == 3
    assert (state.id, state.created, "".join(state.text), state.prompt_tokens, state.sent_tokens) == (
        "c1", 7, " a b c", 5, 3)
    assert state.why_not() is None
    body = json.loads(state.continuation(_chat(max_tokens=10).model_dump_json(exclude_unset=True).encode()) or "")
    assert body["messages"][-1] == {"role": "assistant", "content": " a b c"}
    assert (body["continue_final_message"], body["add_generation_prompt"], body["max_tokens"]) == (True, False, 7)


def test_the_client_s_own_continuous_usage_stays_in_its_chunks() -> None:
    state = StreamResume(CHAT, None, client_continuous=True)
    assert state.observe(_block(_chunk({"content": " a"}, 1))).count(b'"usage"') == 1


@pytest.mark.parametrize(("delta", "refusal"), [
    ({"reasoning": "hmm"}, "reasoning"),
    ({"reasoning_content": "hmm"}, "reasoning"),
    ({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\": "}}]}, "tool_call"),
])
def test_reasoning_and_tool_calls_are_not_resumed_but_the_usage_is_still_taken_out(
    delta: dict[str, Any], refusal: str
) -> None:
    state = admit(CHAT, _chat(), True)
    state.observe(_block(_chunk({"content": " a"}, 1), _chunk(delta, 2)))
    assert state.why_not() == refusal
    assert b'"usage"' not in state.observe(_block(_chunk({"content": " b"}, 3)))


def test_an_engine_that_sends_no_usage_is_not_resumed() -> None:
    state = admit(CHAT, _chat(), True)
    chunk = _chunk({"content": " a"}, 1)
    del chunk["usage"]
    state.observe(_block(chunk))
    assert state.why_not() == "no_usage"


@pytest.mark.parametrize(("prompt", "expected"), [("hi", "hi tok0"), (["hi"], ["hi tok0"])])
def test_a_completion_goes_on_from_its_prompt_and_the_text_sent(prompt: Any, expected: Any) -> None:
    state = admit(TEXT, _text(prompt), True)
    state.observe(_block({"id": "t", "created": 1, "choices": [{"index": 0, "text": " tok0", "finish_reason": None}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
    original = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 4, "stream": True}).encode()
    body = json.loads(state.continuation(original) or "")
    assert (body["prompt"], body["max_tokens"]) == (expected, 3)
    # a budget already spent: nothing to ask for
    assert state.continuation(json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1}).encode()) is None


def test_a_stream_broken_before_any_token_is_asked_again_as_it_was() -> None:
    state = admit(CHAT, _chat(), True)
    state.observe(_block(_chunk({"role": "assistant", "content": ""}, 0)))
    original = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
    assert state.continuation(original) == original


class _Call:
    def __init__(self, strip_usage: bool) -> None:
        self.info = RequestInfo("r", 0.0)
        self.model = "m"
        self.strip_usage = strip_usage
        self.events = 0
        self.finishes: list[bytes] = []
        self.said = False
        self.accounted: list[dict[str, Any]] = []

    def _account(self, usage: dict[str, Any] | None) -> None:
        assert usage is not None
        self.accounted.append(usage)


@pytest.mark.parametrize("strip_usage", [False, True])
def test_the_next_engine_s_events_continue_the_client_s_stream(strip_usage: bool) -> None:
    state = admit(CHAT, _chat(), True)
    state.observe(_block(_chunk({"role": "assistant", "content": ""}, 0), _chunk({"content": " a"}, 1)))
    call = _Call(strip_usage)
    rewrite = _Rewriter(call, state)  # type: ignore[arg-type]
    nxt = {"id": "c2", "created": 9}
    final = {**nxt, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,
                                             "prompt_tokens_details": {"cached_tokens": 8}}}
    out = rewrite.block(_block(
        {**_chunk({"role": "assistant", "content": ""}, 0), **nxt},  # its opening chunk: dropped
        {**_chunk({"content": " b"}, 1), **nxt},
        {**_chunk({"content": " c"}, 2, "stop"), **nxt},
        final,
    ) + b"data: [DONE]\n\n")
    events = [e[6:] for e in out.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    assert {(o["id"], o["created"]) for o in objs} == {("c1", 7)}
    assert [o["choices"][0]["delta"] for o in objs if o["choices"]] == [{"content": " b"}, {"content": " c"}]
    assert all("usage" not in o for o in objs if o["choices"])
    whole = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert call.accounted == [whole]
    assert [o["usage"] for o in objs if not o["choices"]] == ([] if strip_usage else [whole])
    assert call.finishes == [b"stop"]


def test_the_next_engine_s_opening_chunk_is_dropped_when_the_client_asked_for_usage_in_every_chunk() -> None:
    """vLLM puts the usage so far (0 tokens) in its role chunk too: kept, the client would get an
    empty delta in the middle of its answer (found by tests/integration/test_vllm_stream_resume.py)."""
    state = admit(CHAT, _chat(stream_options={"include_usage": True, "continuous_usage_stats": True}), True)
    state.observe(_block(_chunk({"role": "assistant", "content": ""}, 0), _chunk({"content": " a"}, 1)))
    rewrite = _Rewriter(_Call(False), state)  # type: ignore[arg-type]
    out = rewrite.block(_block(
        {**_chunk({"role": "assistant", "content": ""}, 0), "id": "c2"},
        {**_chunk({"content": " b"}, 1), "id": "c2"},
    ))
    objs = [json.loads(e[6:]) for e in out.split(b"\n\n") if e]
    assert [(o["choices"][0]["delta"], o["usage"]["completion_tokens"]) for o in objs] == [({"content": " b"}, 2)]
