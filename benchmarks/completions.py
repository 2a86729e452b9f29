"""What counts as a complete answer from the gateway, for load generators and their tests.

The lab's random-weight model may emit nothing but tokens that decode to no text, so content
proves nothing. What does: the request asked for exactly `max_tokens` tokens with `ignore_eos`,
so a complete answer ends with finish_reason "length" and its usage counts exactly that many
completion tokens. A stream cut short (a closed connection, a missing final chunk or usage
event) never has both, whatever content it carried before.
"""

from collections.abc import Iterable
from typing import Any


class Incomplete(Exception):
    """The answer did not end as asked."""


def _check_end(finish_reason: str | None, usage: Any, max_tokens: int) -> None:
    if finish_reason != "length":
        raise Incomplete(f"finish_reason {finish_reason!r}, not 'length'")
    if usage is None:
        raise Incomplete("no usage")
    if usage.completion_tokens != max_tokens:
        raise Incomplete(f"{usage.completion_tokens} completion tokens, not {max_tokens}")


def check_stream(chunks: Iterable[Any], max_tokens: int) -> str:
    """Read a streamed chat completion (openai ChatCompletionChunk objects, asked with
    stream_options.include_usage) to its end; its text, or Incomplete."""
    text: list[str] = []
    finish_reason: str | None = None
    usage = None
    for chunk in chunks:
        if finish_reason is not None and chunk.choices:
            raise Incomplete("a chunk after the one that finished")
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish_reason = choice.finish_reason or finish_reason
        usage = chunk.usage or usage
    _check_end(finish_reason, usage, max_tokens)
    return "".join(text)


def check_whole(completion: Any, max_tokens: int) -> str:
    """A non-streamed chat completion (openai ChatCompletion); its text, or Incomplete."""
    if len(completion.choices) != 1:
        raise Incomplete(f"{len(completion.choices)} choices, not 1")
    choice = completion.choices[0]
    _check_end(choice.finish_reason, completion.usage, max_tokens)
    return choice.message.content or ""
