"""Mid-stream failover: a streamed chat or completion whose engine dies after the first byte
goes on from another ready engine of the same model and release stage, in the same stream.

The continuation is an ordinary request to the next engine: a chat gets the text sent so far as
a final assistant message with `continue_final_message: true` and `add_generation_prompt: false`
(vLLM's chat API), a completion gets it appended to its prompt, and `max_tokens` (or
`max_completion_tokens`) shrinks by the completion tokens already sent. Those are counted by the
engine itself: a resumable stream asks it for `continuous_usage_stats`, so every chunk says how
many tokens were generated so far (a chunk may carry several tokens, with speculative decoding,
or none, while a parser holds text back, so counting chunks would be wrong); the gateway takes
that usage out of the chunks again unless the client asked for it. The client's stream keeps
the first engine's `id` and `created`; the next engine's opening role chunk is dropped; the last
usage counts the prompt once and every completion token of both engines.

What is not resumed ends as before, with the in-band error event, and says why in the access
log (`resume`) and in `pli_gateway_stream_resumed_total{outcome}`: the model's switch is off,
`n` > 1, `logprobs`, `echo`, a completion prompt of token ids or several prompts, a client that
continues its own assistant message, a tool call being streamed, reasoning of a model family
that has no recipe for it (service/resume_families.py, docs/failover.md), an engine that sent no
usage, or no other engine. One resumption per request: a second engine that dies too ends the
stream with the error event. A refusal for the answer's content (reasoning, tool call) also
names its cause in the error event's message.

A chat answer with reasoning (`reasoning_content` / `reasoning`) goes on per its model's family
(service/resume_families.py): cut mid-reasoning, the final assistant message is the thinking
block's opening plus the reasoning so far (the raw text, so the next engine's parser goes on
filing reasoning); cut in the content after it, the content alone with thinking switched off.
A tool call cannot be continued by the next engine's parser (it reads only the text that engine
generates, so the rest of a call whose opening markers are in the prompt would come back as
content, with its index restarted): refused, for every family. A stream cut before the parser
sent any of the call (it holds the markers back) resumes as content, and the call comes whole
from the next engine.
"""

import asyncio
import json
import logging
import time
from typing import Any, Protocol

import aiohttp
from starlette.types import Send

from service.accesslog import RequestInfo
from service.metrics import Metrics
from service.resume_families import WHY, Family
from service.routing import Engine, Router
from service.schemas import ChatCompletionRequest, CompletionRequest

log = logging.getLogger("service.stream_resume")

_SSE_END = b"\n\n"
_DONE = b"data: [DONE]"
# vLLM's chunks (compact JSON) carry their usage as a flat object (UsageInfo without details):
# cut out by bytes where it is, else by encoding the parsed event again.
_CHUNK_USAGE = b',"usage":{'
_REASONING = ("reasoning", "reasoning_content")

RESUMED = "resumed"  # outcome: the stream went on from another engine to its end
FAILED = "failed"  # the next engine failed too (or answered no stream)
CLIENT_GONE = "client_disconnected"  # the client left while the next engine answered


class Relay(Protocol):
    """What a resumption uses of the relayed call (service/proxy.py's ProxyCall)."""

    info: RequestInfo
    model: str
    path: str
    session_id: str | None
    headers_out: dict[str, str]
    strip_usage: bool
    done: bool
    events: int
    finishes: list[bytes]
    said: bool

    async def _cut(self, send: Send, reason: str, message: str, code: str = ...) -> None: ...

    def _account(self, usage: dict[str, Any] | None) -> None: ...


def admit(
    path: str, body: ChatCompletionRequest | CompletionRequest, enabled: bool, family: Family | None = None
) -> "StreamResume":
    """The resumption state of a streamed generation, with the reason it may never resume, if one
    is already known from the request. `family`: how the model's reasoning goes on, if it can."""
    extra = body.model_extra or {}
    refusal = None
    if not enabled:
        refusal = "off"
    elif body.n > 1:
        refusal = "n"
    elif extra.get("logprobs") or extra.get("top_logprobs"):
        refusal = "logprobs"
    elif extra.get("echo"):
        refusal = "echo"
    elif isinstance(body, CompletionRequest) and not _one_text_prompt(body.prompt):
        refusal = "prompt_not_text"
    elif isinstance(body, ChatCompletionRequest) and extra.get("continue_final_message"):
        refusal = "client_continues"
    elif _constrained(extra):
        # The next engine would start the grammar over after the text already sent: the client
        # would get JSON (or a regex's match) that is not whole, with a normal finish.
        refusal = "structured_output"
    asked = body.stream_options.model_extra if body.stream_options is not None else None
    return StreamResume(path, refusal, bool(asked and asked.get("continuous_usage_stats")), family)


_GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")


def _constrained(extra: dict[str, Any]) -> bool:
    """Whether the request asks vLLM for structured output (a grammar over the whole answer)."""
    fmt = extra.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        return True
    return any(extra.get(name) is not None for name in _GUIDED)


def _one_text_prompt(prompt: Any) -> bool:
    return isinstance(prompt, str) or (isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str))


class StreamResume:
    """What the client was sent of one stream (only what it was sent: an event cut in half is
    not), and the continuation built from it."""

    def __init__(self, path: str, refusal: str | None, client_continuous: bool, family: Family | None = None) -> None:
        self.chat = path.endswith("chat/completions")
        self.refusal = refusal
        # Resumable when it was admitted: the engine was asked for usage in every chunk, which
        # stays the gateway's to take out even if the stream turns out not resumable later.
        self.watching = refusal is None
        self.client_continuous = client_continuous  # the client asked for usage in every chunk
        self.id: Any = None
        self.created: Any = None
        self.text: list[str] = []  # content (chat) or text (completions)
        self.family = family
        self.reasoning: list[str] = []  # reasoning sent, all of it before any content
        self.said_content = False
        self.prompt_tokens: int | None = None
        self.sent_tokens: int | None = None
        self.finished = False  # a finish_reason was sent
        self.attempted = False

    @property
    def resumable(self) -> bool:
        return self.refusal is None

    def observe(self, block: bytes) -> bytes:
        """Record a block of whole events on its way to the client; returns it without the
        per-chunk usage the gateway asked for, unless the client asked for it too."""
        if not self.watching:
            return block
        out = []
        for event in block.split(_SSE_END):
            if event.startswith(b"data: {"):
                event = self._record(event)
            out.append(event)
        return _SSE_END.join(out)

    def _record(self, event: bytes) -> bytes:
        try:
            obj = json.loads(event[6:])
        except (ValueError, RecursionError):
            self.refusal = "unreadable_event"
            return event
        if not isinstance(obj, dict):
            return event
        if self.id is None:
            self.id, self.created = obj.get("id"), obj.get("created")
        usage, choices = obj.get("usage"), obj.get("choices")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if _is_count(prompt) and _is_count(completion):
                self.prompt_tokens, self.sent_tokens = prompt, completion
        if self.refusal is None:
            for choice in choices if isinstance(choices, list) else ():
                self._record_choice(choice)
        if isinstance(usage, dict) and choices and not self.client_continuous:
            at = event.find(_CHUNK_USAGE)
            end = event.find(b"}", at) if at >= 0 else -1
            if end >= 0 and event.find(b"{", at + len(_CHUNK_USAGE), end) < 0:
                return event[:at] + event[end + 1 :]
            del obj["usage"]
            return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        return event

    def _record_choice(self, choice: Any) -> None:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            self.refusal = "n"
            return
        if choice.get("logprobs"):
            self.refusal = "logprobs"
        if choice.get("finish_reason") is not None:
            self.finished = True
        part = choice.get("delta") if self.chat else choice
        if not isinstance(part, dict):
            return
        if part.get("tool_calls"):
            self.refusal = "tool_call"
            return
        # vLLM names the field `reasoning_content` or `reasoning` by version; some send both, alike.
        thought = next((part[f] for f in _REASONING if isinstance(part.get(f), str) and part[f]), None)
        text = part.get("content") if self.chat else part.get("text")
        if thought is not None:
            if self.family is None or self.said_content:
                # No recipe for this family, or reasoning after content: no parser state to give back.
                self.refusal = "reasoning"
                return
            self.reasoning.append(thought)
        if isinstance(text, str):
            if text and self.reasoning and not self.family_switched:
                self.refusal = "reasoning_then_content"
            self.said_content = self.said_content or bool(text)
            self.text.append(text)

    @property
    def family_switched(self) -> bool:
        return self.family is not None and self.family.switched

    def continuation(self, original: bytes | memoryview) -> bytes | None:
        """The request that goes on from what was sent; None if the answer's budget is spent."""
        sent, thought = "".join(self.text), "".join(self.reasoning)
        spent = self.sent_tokens or 0
        if not sent and not thought:
            # Nothing sent yet (vLLM's role chunk only, or tokens a parser held back): asked again
            # as it was, and the tokens held back are generated, and counted, again.
            self.sent_tokens = 0
            return bytes(original)
        body = json.loads(bytes(original))
        for field in ("max_tokens", "max_completion_tokens"):
            if isinstance(body.get(field), int):
                if body[field] <= spent:
                    return None
                body[field] -= spent
        if self.chat:
            if thought and not sent and self.family is not None:
                # Cut mid-reasoning: the raw text, from the thinking block's opening on.
                sent = self.family.opener + thought
            elif thought:
                # Cut in the content after the reasoning, which the template would drop: the
                # content alone, and the parser told (thinking off) that all of it is content.
                kwargs = body.get("chat_template_kwargs")
                kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
                body["chat_template_kwargs"] = {**kwargs, "thinking": False, "enable_thinking": False}
            body["messages"] = [*body["messages"], {"role": "assistant", "content": sent}]
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        elif isinstance(body["prompt"], list):
            body["prompt"] = [body["prompt"][0] + sent]
        else:
            body["prompt"] += sent
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def told(self) -> str:
        """The cause of a refusal for the answer's content, for the client's error event ("" if none)."""
        why = WHY.get(self.refusal or "")
        return f" It could not go on from another engine: {why}." if why else ""

    def why_not(self) -> str | None:
        """Why this stream cannot go on from another engine, now that it broke."""
        if self.refusal is not None:
            return self.refusal
        if self.sent_tokens is None or self.prompt_tokens is None:
            return "no_usage"  # the engine ignored continuous_usage_stats: the tokens sent are unknown
        if self.finished:
            # The finish_reason came, only [DONE] (or the usage event) did not: nothing to go on
            # with; the stream ends as any other that breaks the protocol.
            return "answer_finished"
        return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


async def take_over(
    call: Relay,
    state: StreamResume,
    dead: Engine,
    send: Send,
    *,
    session: aiohttp.ClientSession,
    router: Router,
    metrics: Metrics,
    timeout: aiohttp.ClientTimeout,
    first_byte_timeout_s: float,
    original: bytes | memoryview,
) -> bool:
    """Go on with the stream `dead` broke off, from another engine; False (nothing sent) where it
    may not, with the reason in the access log and the metric. Ends the client's response
    (its [DONE], or the error event) whenever it returns True."""
    info = call.info
    reason = state.why_not() if not state.attempted else "once"
    engine = None
    if reason is None:
        engine = router.pick(call.model, (dead,), call.session_id, dead.stage)
        reason = None if engine is not None else "no_engine"
    body = state.continuation(original) if reason is None else None
    if reason is None and body is None:
        reason = "budget_spent"
    if reason is not None or engine is None or body is None:
        _count(metrics, call, reason or "no_engine")
        return False
    state.attempted = True
    info.attempts += 1
    info.engine = engine.name
    # The tokens sent: where the text of one engine ends and the next one's begins (an operator
    # comparing the answer with the engines' own logs, and the real-vLLM test, need it).
    log.info("stream of request %s resumed on engine %s after %s broke off, %d completion tokens "
             "(%d characters) sent", info.request_id, engine.name, dead.name, state.sent_tokens or 0,
             sum(map(len, state.text)))
    router.begin(engine)
    outcome = FAILED
    try:
        outcome = await _relay(call, state, engine, send, session, timeout, first_byte_timeout_s, body, metrics)
    except asyncio.CancelledError:
        outcome = CLIENT_GONE  # the response's context closed the connection: the engine aborts
        raise
    finally:
        router.end(engine)
        _count(metrics, call, outcome)
    return True


async def _relay(
    call: Relay,
    state: StreamResume,
    engine: Engine,
    send: Send,
    session: aiohttp.ClientSession,
    timeout: aiohttp.ClientTimeout,
    first_byte_timeout_s: float,
    body: bytes,
    metrics: Metrics,
) -> str:
    rewrite = _Rewriter(call, state)
    failure, reason = None, "stream_incomplete"
    try:
        async with asyncio.timeout(first_byte_timeout_s) as guard:
            async with session.post(
                engine.url + call.path, data=body, headers=call.headers_out, timeout=timeout, allow_redirects=False
            ) as resp:
                if resp.status != 200 or not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                    failure = f"Engine '{engine.name}' refused to resume the stream: HTTP {resp.status}."
                    reason = f"http_{resp.status}"
                else:
                    engine.mark_ok()
                    pending = b""
                    async for chunk in resp.content.iter_any():
                        guard.reschedule(None)  # bytes came: the read timeout of `timeout` holds from here
                        engine.last_progress = time.monotonic()
                        data = pending + chunk
                        cut = data.rfind(_SSE_END)
                        if cut < 0:
                            pending = data
                            continue
                        block, pending = data[: cut + 2], data[cut + 2 :]
                        out = rewrite.block(block)
                        if out:
                            call.done = out.endswith(_DONE + _SSE_END)
                            if call.info.retained is not None:  # audit.retain: the text the client is sent
                                call.info.retained.stream(out)
                            await send({"type": "http.response.body", "body": out, "more_body": not call.done})
                        if call.done:
                            return RESUMED
                    failure = f"Engine '{engine.name}' ended the resumed stream early."
    except (aiohttp.ClientError, TimeoutError) as exc:
        failure = f"Engine '{engine.name}' failed while resuming the stream: {type(exc).__name__}."
        reason = "stream_broken"
        if engine.healthy:  # as the relay treats a broken stream: out of rotation until a check passes
            log.warning("engine %s taken out of rotation: %s", engine.name, reason)
            engine.mark_failed()
    metrics.upstream_errors.labels(engine.name, reason).inc()
    engine.suspect()
    await call._cut(send, "upstream_stream_broken", failure or "The resumed stream failed.")
    return FAILED


class _Rewriter:
    """The next engine's events as the client's stream goes on: the first engine's id and
    created, no second role chunk, usage summed over both engines."""

    def __init__(self, call: Relay, state: StreamResume) -> None:
        self.call = call
        self.state = state

    def block(self, block: bytes) -> bytes:
        out = []
        for event in block.split(_SSE_END):
            if not event.startswith(b"data: {"):
                if event:
                    out.append(event)
                continue
            try:
                obj = json.loads(event[6:])
            except (ValueError, RecursionError):
                out.append(event)  # relayed as it came, as the first engine's would be
                continue
            kept = self._event(obj) if isinstance(obj, dict) else obj
            if kept is not None:
                out.append(b"data: " + json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode())
        return b"".join(e + _SSE_END for e in out)

    def _event(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        state, call = self.state, self.call
        choices = obj.get("choices")
        if choices is not None or "usage" in obj:  # a chunk, not an in-band error event
            obj["id"], obj["created"] = state.id, state.created
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                delta.pop("role", None)  # the client had the role from the first engine
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                call.finishes.append(str(choice["finish_reason"]).encode())
        usage = obj.get("usage")
        if isinstance(usage, dict):
            usage = obj["usage"] = self._whole(usage)
            if not choices:  # the last usage event: the request's, counted once
                call._account(usage)
                if call.strip_usage:
                    return None
            elif not state.client_continuous:
                del obj["usage"]
        if isinstance(choices, list) and choices and not any(self._says(c) for c in choices):
            # The opening chunk: only the role, and with continuous usage the count the client
            # already had from the first engine's last chunk; kept, it is an empty delta mid-answer.
            return None
        if choices:
            call.events += 1
            call.said = True
        return obj

    def _says(self, choice: Any) -> bool:
        """The choice carries something for the client (vLLM's opening chunk carries the role only)."""
        if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
            return True
        if not self.state.chat:
            return bool(choice.get("text"))
        delta = choice.get("delta")
        return not isinstance(delta, dict) or any(value for key, value in delta.items() if key != "role")

    def _whole(self, usage: dict[str, Any]) -> dict[str, Any]:
        """The next engine's usage as the whole answer's: the first prompt, and both engines'
        completion tokens (its own prompt held the text sent so far)."""
        completion = usage.get("completion_tokens")
        sent, prompt = self.state.sent_tokens or 0, self.state.prompt_tokens or 0
        if not _is_count(completion) or not isinstance(completion, int):
            return usage
        completion += sent
        whole = dict(usage, prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
        whole.pop("prompt_tokens_details", None)  # the next prompt's cache hits are not the request's
        return whole


def _count(metrics: Metrics, call: Relay, outcome: str) -> None:
    call.info.resume = outcome
    metrics.stream_resumed.labels(call.model, outcome).inc()
