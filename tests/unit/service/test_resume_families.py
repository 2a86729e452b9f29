"""Resuming answers with reasoning or tool calls, per model family (service/resume_families.py),
checked against a real chat template: the project's DeepSeek checkpoint's (installer/modelmaker/
deepseek.py, profile deepseek-v3-switch), rendered by transformers as vLLM renders a chat
(`apply_chat_template` with `continue_final_message`, which is `render_jinja_template`).

The next engine's parser state is vLLM's rule (vllm/reasoning/basic_parsers.py
`is_reasoning_end`, chat_completion/serving.py): the prompt ended the reasoning when, scanning it
backwards, `</think>` comes before `<think>`; deepseek_v3 delegates to the deepseek_r1 parser only
with `thinking` or `enable_thinking` in chat_template_kwargs, else every token is content."""

import json
from typing import Any

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from installer.modelmaker.deepseek import BOS, CHAT_TEMPLATE
from service.config import EngineConfig
from service.resume_families import FAMILIES, family
from service.routing import Router
from service.schemas import ChatCompletionRequest
from service.stream_resume import StreamResume, admit

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 7 prime?"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def _render(messages: list[dict[str, Any]], **kwargs: Any) -> str:
    rendered: Any = render_jinja_template(conversations=[messages], chat_template=CHAT_TEMPLATE, bos_token=BOS,
                                          **kwargs)
    return str(rendered[0][0])  # (the rendered chats, the generation indices)


def _prompt_of(body: dict[str, Any]) -> str:
    """The prompt vLLM renders for a chat request body."""
    return _render(body["messages"], tools=body.get("tools"),
                   add_generation_prompt=body.get("add_generation_prompt", True),
                   continue_final_message=body.get("continue_final_message", False),
                   **(body.get("chat_template_kwargs") or {}))


def _next_tokens_are(body: dict[str, Any], prompt: str) -> str:
    """What the next engine files its tokens as, from the start (deepseek_v3 reasoning parser)."""
    kwargs = body.get("chat_template_kwargs") or {}
    if not (kwargs.get("thinking") or kwargs.get("enable_thinking")):
        return "content"  # IdentityReasoningParser
    ended = prompt.rfind("</think>") > prompt.rfind("<think>")
    return "content" if ended else "reasoning until </think>"


def _request(**extra: Any) -> tuple[ChatCompletionRequest, bytes]:
    body = {"model": "m", "stream": True, "messages": MESSAGES, "max_tokens": 100, **extra}
    return ChatCompletionRequest.model_validate(body), json.dumps(body).encode()


def _sent(state: StreamResume, *deltas: dict[str, Any], done: int) -> None:
    for n, delta in enumerate(deltas):
        chunk = {"id": "c", "created": 1, "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                 "usage": {"prompt_tokens": 9, "completion_tokens": done if n == len(deltas) - 1 else n + 1,
                           "total_tokens": 0}}
        state.observe(b"data: " + json.dumps(chunk).encode() + b"\n\n")


@pytest.mark.parametrize("switch", [{"thinking": True}, {"enable_thinking": True}])
def test_cut_mid_reasoning_the_next_engine_continues_the_same_raw_text_as_reasoning(switch: dict[str, Any]) -> None:
    body, raw = _request(chat_template_kwargs=switch)
    state = admit(CHAT, body, True, family("deepseek-v3-switch"))
    _sent(state, {"role": "assistant", "content": ""}, {"reasoning_content": "7 has no"},
          {"reasoning_content": " divisor but 1\n"}, done=6)
    assert state.why_not() is None
    cont = json.loads(state.continuation(raw) or b"")
    # The rendered continuation is the first engine's prompt plus the text it generated, byte for byte.
    first = _prompt_of(json.loads(raw))
    assert first.endswith("<｜Assistant｜><think>\n")
    assert _prompt_of(cont) == first + "7 has no divisor but 1\n"
    assert _next_tokens_are(cont, _prompt_of(cont)) == "reasoning until </think>"
    assert cont["max_tokens"] == 100 - 6 and cont["chat_template_kwargs"] == switch


def test_cut_in_the_content_after_reasoning_goes_on_from_the_content_with_thinking_off() -> None:
    body, raw = _request(chat_template_kwargs={"thinking": True})
    state = admit(CHAT, body, True, family("deepseek-v3-switch"))
    _sent(state, {"role": "assistant", "content": ""}, {"reasoning_content": "It is."},
          {"reasoning_content": " Done.", "content": "Yes"}, {"content": ", 7 is"}, done=9)
    assert state.why_not() is None
    cont = json.loads(state.continuation(raw) or b"")
    assert cont["messages"][-1] == {"role": "assistant", "content": "Yes, 7 is"}
    assert _prompt_of(cont) == _render(MESSAGES) + "<｜Assistant｜>Yes, 7 is"
    assert _next_tokens_are(cont, _prompt_of(cont)) == "content"
    # Why not the raw text: the template keeps only what follows </think> of an assistant
    # message, so transformers (and so vLLM, 400) refuses to continue it.
    whole = [*MESSAGES, {"role": "assistant", "content": "<think>\nIt is. Done.</think>Yes, 7 is"}]
    with pytest.raises(ValueError, match="final message does not appear"):
        _render(whole, continue_final_message=True, thinking=True)


def test_deepseek_r1_refuses_content_after_reasoning_its_parser_would_file_it_as_reasoning() -> None:
    body, _ = _request()
    state = admit(CHAT, body, True, family("deepseek-r1"))
    _sent(state, {"reasoning_content": "Hm"}, done=2)
    assert state.why_not() is None  # mid-reasoning: as the switched family
    _sent(state, {"content": "Yes"}, done=4)
    assert state.why_not() == "reasoning_then_content"
    assert "drops the reasoning" in state.told()
    # Without thinking switched off, the content alone would be read as reasoning:
    content_only = {"messages": [*MESSAGES, {"role": "assistant", "content": "Yes"}],
                    "chat_template_kwargs": {"thinking": True}, "continue_final_message": True,
                    "add_generation_prompt": False}
    assert _next_tokens_are(content_only, _prompt_of(content_only)) == "reasoning until </think>"


@pytest.mark.parametrize("name", [None, "deepseek-v3.1", "deepseek-v3"])
def test_reasoning_of_a_family_without_a_recipe_is_refused(name: str | None) -> None:
    state = admit(CHAT, _request()[0], True, family(name))
    _sent(state, {"reasoning": "Hm"}, done=1)
    assert state.why_not() == "reasoning" and "no way of continuing" in state.told()


def test_both_reasoning_fields_count_once_and_reasoning_after_content_is_refused() -> None:
    body, raw = _request(chat_template_kwargs={"thinking": True})
    state = admit(CHAT, body, True, family("deepseek-v3-switch"))
    _sent(state, {"reasoning": "a", "reasoning_content": "a"}, {"reasoning": "b", "reasoning_content": "b"}, done=2)
    assert json.loads(state.continuation(raw) or b"")["messages"][-1]["content"] == "<think>\nab"
    _sent(state, {"content": "c"}, {"reasoning": "d"}, done=4)
    assert state.why_not() == "reasoning"


def test_a_tool_call_streamed_is_refused_and_one_not_yet_streamed_comes_whole_from_the_next_engine() -> None:
    body, raw = _request(tools=TOOLS)
    state = admit(CHAT, body, True, family("deepseek-v3-switch"))
    # The parser holds the call's markers back: until its first delta, only content was sent.
    _sent(state, {"content": "Let me look"}, done=5)
    cont = json.loads(state.continuation(raw) or b"")
    assert cont["messages"][-1] == {"role": "assistant", "content": "Let me look"}
    # The template renders the content verbatim after the tools' system prompt: the next engine
    # writes <｜tool▁calls▁begin｜> itself, and its parser reads the whole call. (With thinking
    # off the first prompt ended in `</think>`, which the template drops from an assistant
    # message: the continuation's prompt lacks that one marker, for every resumed answer of this
    # template with thinking off; the parser, switched off, files it all as content either way.)
    assert _prompt_of(cont) == _prompt_of(json.loads(raw)).removesuffix("</think>") + "Let me look"
    _sent(state, {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                  "function": {"name": "lookup", "arguments": ""}}]}, done=9)
    assert state.why_not() == "tool_call" and "tool call" in state.told()


def test_nothing_sent_but_tokens_held_back_asks_again_as_it_was() -> None:
    body, raw = _request(chat_template_kwargs={"thinking": True})
    state = admit(CHAT, body, True, family("deepseek-v3-switch"))
    _sent(state, {"role": "assistant", "content": ""}, done=1)  # <think> written, held back
    assert state.continuation(raw) == raw and state.sent_tokens == 0


def test_a_model_whose_engines_disagree_on_the_family_has_none() -> None:
    engines = [EngineConfig(name="a", url="http://h:1", model="m", resume_family="deepseek-r1"),
               EngineConfig(name="b", url="http://h:2", model="m", resume_family="deepseek-r1"),
               EngineConfig(name="c", url="http://h:3", model="x", resume_family="deepseek-r1"),
               EngineConfig(name="d", url="http://h:4", model="x", resume_family="deepseek-v3-switch"),
               EngineConfig(name="e", url="http://h:5", model="y")]
    assert Router(engines, 1.0).resume_family == {"m": "deepseek-r1"}
    assert set(FAMILIES) <= {"deepseek-r1", "deepseek-v3-switch"}
