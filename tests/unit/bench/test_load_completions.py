"""The load generator's success criterion (benchmarks/completions.py): an answer counts only
when it ended as asked, exactly max_tokens tokens with finish_reason "length"."""

from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from benchmarks.completions import Incomplete, check_stream, check_whole


def _chunk(content: str | None = None, finish: str | None = None, usage: int | None = None) -> ChatCompletionChunk:
    body: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "tiny", "choices": []}
    if content is not None or finish is not None:
        body["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return ChatCompletionChunk.model_validate(body)


def _stream(*, upto: int, tokens: int = 4) -> list[ChatCompletionChunk]:
    """A whole stream of `tokens` tokens (content, finish, usage), cut after `upto` chunks."""
    whole = [*(_chunk(f"t{i}") for i in range(tokens - 1)), _chunk("t", "length"), _chunk(usage=tokens)]
    return whole[:upto]


def test_a_whole_stream_is_a_success() -> None:
    assert check_stream(_stream(upto=99), 4) == "t0t1t2t"
    # Nothing but tokens that decode to no text (the random-weight model): still complete.
    assert check_stream([_chunk(""), _chunk("", "length"), _chunk(usage=2)], 2) == ""


@pytest.mark.parametrize(
    ("upto", "why"),
    [(1, "finish_reason None"), (3, "finish_reason None"), (4, "no usage"), (0, "finish_reason None")],
)
def test_a_truncated_stream_is_a_failure(upto: int, why: str) -> None:
    """Cut after its first content chunk, before its finish or before its usage event."""
    with pytest.raises(Incomplete, match=why):
        check_stream(_stream(upto=upto), 4)


def test_a_stream_must_end_as_asked() -> None:
    with pytest.raises(Incomplete, match="'stop', not 'length'"):
        check_stream([_chunk("a"), _chunk("", "stop"), _chunk(usage=2)], 4)
    with pytest.raises(Incomplete, match="3 completion tokens, not 4"):
        check_stream([_chunk("a"), _chunk("", "length"), _chunk(usage=3)], 4)
    with pytest.raises(Incomplete, match="a chunk after the one that finished"):
        check_stream([_chunk("a", "length"), _chunk("b"), _chunk(usage=4)], 4)


def _whole(finish: str, tokens: int) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "tiny",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens},
    })


def test_a_whole_answer_must_end_as_asked() -> None:
    assert check_whole(_whole("length", 4), 4) == "hi"
    with pytest.raises(Incomplete, match="'stop', not 'length'"):
        check_whole(_whole("stop", 4), 4)
    with pytest.raises(Incomplete, match="1 completion tokens, not 4"):
        check_whole(_whole("length", 1), 4)
