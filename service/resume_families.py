"""How a chat answer with reasoning goes on from another engine, per model family (the serving
profile, installer/inventory/profiles.py), for mid-stream failover (service/stream_resume.py).

The gateway sees vLLM's parsed deltas (`reasoning_content` / `reasoning`, `content`,
`tool_calls`), not the model's raw text. A continuation is the conversation plus the raw text so
far as a final assistant message with `continue_final_message`, which the engine renders with the
model's chat template and continues. Two things must hold for the client to get one coherent
stream: the rendered prompt ends with the raw text the first engine had generated (markers
included), and the next engine's reasoning parser starts in the state the first one was in.

vLLM's parsers (deepseek_r1, and deepseek_v3 with thinking on, which delegates to it) decide
once per request whether the *prompt* ended the reasoning: scanning it backwards, a `</think>`
before any `<think>` means every new token is content; otherwise new tokens are reasoning until
the model writes `</think>`. The families' chat templates write an assistant message verbatim
unless it holds `</think>`: then they keep only what follows it (and transformers refuses the
continuation, since the message no longer appears whole in the rendered prompt). Hence:

- **mid-reasoning** (reasoning sent, no content yet): the final message is the generation
  prompt's opening of the thinking block (`opener`) plus the reasoning so far. It renders as the
  first engine's prompt plus what it generated, byte for byte, and ends inside the block, so the
  next engine's parser files tokens as reasoning until `</think>`, then as content.
- **mid-content after reasoning**: the raw text cannot be given back (the template drops the
  reasoning). A family whose reasoning is switched per request (`thinking` / `enable_thinking`,
  the deepseek_v3 reasoning parser) goes on from the content alone with thinking switched off
  for the continuation, so vLLM's parser files everything as content: the prompt the model gets
  for that answer in a later turn of the conversation, without its reasoning, so not the text
  one engine would have written alone. A family whose parser has no switch (deepseek_r1) would
  file the rest of the answer as reasoning: refused (`reasoning_then_content`).

A family not listed here (or a model whose engines disagree) refuses any answer with reasoning
(`reasoning`), as before. Tool calls are refused for every family (service/stream_resume.py
says why). docs/failover.md has the table.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """What the continuation of a reasoning answer needs to know of a family's chat template."""

    # The text the generation prompt writes after the assistant's marker when thinking is on:
    # the raw text before the first reasoning token (the parser streams none of it).
    opener: str
    # Reasoning is switched per request by chat_template_kwargs `thinking` / `enable_thinking`
    # (vLLM's deepseek_v3 reasoning parser): a continuation of the content alone can switch it off.
    switched: bool


# Checked against the project's DeepSeek checkpoint's template (installer/modelmaker/deepseek.py,
# the `deepseek-v3-switch` profile) by tests/unit/service/test_resume_families.py. deepseek-r1:
# R1's template as published since 2025-02 opens the block the same way (`<｜Assistant｜><think>\n`)
# and keeps only what follows `</think>` of an assistant message, as the project's does.
# Not listed: deepseek-v3.1 and deepseek-v3.2 (their templates render the last assistant message
# after a `</think>` of their own unless it is marked as a `prefix`: not checked here), deepseek-v3
# and deepseek-v2 (no reasoning parser: no reasoning to resume).
FAMILIES: dict[str, Family] = {
    "deepseek-v3-switch": Family(opener="<think>\n", switched=True),
    "deepseek-r1": Family(opener="<think>\n", switched=False),
}

# What a refusal tells the client in the stream's error event (and the access log's `resume`).
WHY = {
    "reasoning": "the answer was reasoning, and this model's family has no way of continuing it",
    "reasoning_then_content": (
        "the answer had ended its reasoning, and this model's chat template drops the reasoning from "
        "a continued answer while its reasoning parser would file the rest of it as reasoning"
    ),
    "tool_call": (
        "the answer was streaming a tool call, which the next engine's tool-call parser could not "
        "continue (it reads only the text it generates itself)"
    ),
}


def family(name: str | None) -> Family | None:
    return FAMILIES.get(name) if name else None
