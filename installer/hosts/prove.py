"""The last word of `installer up`: from this machine, each host's gateway answers a real request
for every model the host serves, with the installer's own API key — the path a client takes,
end to end, over HTTPS verified against the deployment's CA (unless the inventory turned TLS
off). The request is the model's task's: a chat completion (generate), embeddings (embed), a
rerank (score).

`up` also proves what a user calls on a chat model beyond the chat, by what its engines parse
(their argv in the deployment plan, `Parsers`): a forced tool call where they run a tool-call
parser, reasoning where they run a reasoning parser. A check that cannot apply says so in the
proof's detail ("reasoning: not checked, no reasoning parser"); none passes unsaid."""

import itertools
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from installer.hosts import remote
from installer.inventory import Inventory
from installer.tls import store as tls_store


@dataclass(frozen=True)
class Proof:
    host: str
    endpoint: str
    ok: bool
    detail: str
    latency_ms: float | None = None


def _request(url: str, secret: str, body: dict | None, timeout: float,
             ctx: ssl.SSLContext | None, headers: Mapping[str, str] | None = None,
             read: Callable[[IO[bytes]], Any] = json.load) -> tuple[int, dict, dict[str, str]]:
    """Status, JSON body (a 200's read by `read`) and response headers (names in lower case)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={
        "Authorization": f"Bearer {secret}", "Content-Type": "application/json", **(headers or {}),
    })
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return resp.status, read(resp), {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        got = {k.lower(): v for k, v in exc.headers.items()}
        try:
            return exc.code, json.load(exc), got
        except ValueError:
            return exc.code, {}, got


def tls_problem(exc: BaseException, base: str, ca_file: Path | None) -> str | None:
    """A certificate failure in words a user can act on, or None if exc is not one."""
    reason = getattr(exc, "reason", exc)
    if not isinstance(reason, ssl.SSLCertVerificationError):
        return None
    msg = reason.verify_message or str(reason)
    if "expired" in msg:
        return f"the TLS certificate of {base} has expired; run `installer up` to renew it"
    if "mismatch" in msg.lower() or reason.verify_code == 62:
        return (f"the TLS certificate of {base} does not match {base.split('//', 1)[-1]} ({msg}); "
                "it was issued for another host name or address")
    return f"the TLS certificate of {base} is not trusted ({msg}); it is not signed by the CA {ca_file}"


@dataclass(frozen=True)
class _Ask:
    """A task's proof request: what is sent, and what a real answer to it holds."""

    path: str
    body: Callable[[str], dict[str, Any]]
    answered: Callable[[Any], bool]
    done: str  # "<done> via gateway in N ms"
    failed: str  # "<failed> through the gateway: STATUS message"


def _numbers(values: Any) -> bool:
    return isinstance(values, list) and bool(values) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    )


def _embedded(answer: dict[str, Any]) -> bool:
    data = answer.get("data")
    return isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict) and _numbers(
        data[0].get("embedding")
    )


RERANK_DOCUMENTS = ["Hello there.", "The weather is cold."]


def _ranked(answer: dict[str, Any]) -> bool:
    results = answer.get("results")
    return isinstance(results, list) and len(results) == len(RERANK_DOCUMENTS) and _numbers(
        [r.get("relevance_score") if isinstance(r, dict) else None for r in results]
    )


ASKS: dict[str, _Ask] = {
    "generate": _Ask(
        "/chat/completions",
        lambda m: {"model": m, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
        lambda a: bool(a.get("choices")),
        "chat", "chat completion",
    ),
    "embed": _Ask(
        "/embeddings",
        lambda m: {"model": m, "input": "Say hello."},
        _embedded,
        "embeddings", "embeddings",
    ),
    "score": _Ask(
        "/rerank",
        lambda m: {"model": m, "query": "Say hello.", "documents": RERANK_DOCUMENTS},
        _ranked,
        "rerank", "rerank",
    ),
}


@dataclass(frozen=True)
class Parsers:
    """What a generate model's engines parse out of its output, as their argv says (the serving
    profile writes these flags: installer/inventory/profiles.py)."""

    reasoning: str | None = None  # --reasoning-parser
    # --tool-call-parser, counted only with --enable-auto-tool-choice: without both, vLLM has no
    # tool parser and answers a forced tool call 400 "requires --tool-call-parser to be set"
    # (vllm/renderers/online_renderer.py, 0.26.0 and 0.32.0)
    tool_call: str | None = None
    differ: bool = False  # the model's engines do not all run the same parsers


class EngineArgv(Protocol):
    """An engine as the deployment plan has it (installer/planning/engines.py EngineInstance)."""

    @property
    def served_name(self) -> str: ...
    @property
    def argv(self) -> tuple[str, ...]: ...


def parsers_of(argv: Sequence[str]) -> Parsers:
    values = {flag: value for flag, value in itertools.pairwise(argv) if flag.startswith("--")}
    tools = values.get("--tool-call-parser") if "--enable-auto-tool-choice" in argv else None
    return Parsers(values.get("--reasoning-parser"), tools)


def parsers_by_model(engines: Iterable[EngineArgv]) -> dict[str, Parsers]:
    """Each served model's parsers, from all of its engines (a gateway may route to any)."""
    seen: dict[str, set[Parsers]] = {}
    for e in engines:
        seen.setdefault(e.served_name, set()).add(parsers_of(e.argv))
    return {name: found.pop() if len(found) == 1 else Parsers(differ=True) for name, found in seen.items()}


# The forced tool call: `tool_choice` names the function, and vLLM turns its JSON schema into a
# grammar, so even random weights answer with arguments that parse. `additionalProperties: false`
# and `maxLength` keep the JSON short; max_tokens leaves room for a tool parser's envelope, which
# random weights spell out byte by byte under the grammar (DeepSeek's: docs/deepseek.md), and for
# the whitespace a grammar allows between JSON tokens (docs/gateway.md#reasoning-and-tool-calls).
TOOL_NAME = "get_weather"
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TOOL_MAX_TOKENS = 192
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float),
                                                   "boolean": bool, "object": dict, "array": list}
# Thinking on or off, by the names chat templates read (DeepSeek-V3.1's `thinking`, Qwen3's and
# others' `enable_thinking`); vLLM passes a template only the names it declares
# (vllm/renderers/hf.py resolve_chat_template_kwargs), and the deepseek_v3 reasoning parser
# parses reasoning only with thinking on.
THINKING_ON = {"thinking": True, "enable_thinking": True}
THINKING_OFF = {"thinking": False, "enable_thinking": False}


def tool_call_body(model: str, thinking_off: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
        "max_tokens": TOOL_MAX_TOKENS,
    }
    if thinking_off:
        body["chat_template_kwargs"] = THINKING_OFF
    return body


def _reasoning_of(message: Any) -> str:
    """The reasoning vLLM parsed out of an answer: `reasoning` (vLLM 0.26 and 0.32, whole and
    streamed: ChatMessage and DeltaMessage), or `reasoning_content`, its name before."""
    if not isinstance(message, dict):
        return ""
    for key in ("reasoning", "reasoning_content"):
        if isinstance(message.get(key), str) and message[key]:
            return str(message[key])
    return ""


def _message(answer: Any) -> Any:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    return choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None


def assembled(stream: IO[bytes]) -> dict[str, Any]:
    """A streamed chat answer read to its end and put together as a whole one's body: the
    deltas' content, reasoning and tool calls (by index; a call's name comes once, its arguments
    in pieces) in choices[0].message, or the stream's error event as the body."""
    message: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    for line in stream:
        if not line.startswith(b"data: {"):
            continue
        event = json.loads(line[6:])
        if "error" in event:
            return {"error": event["error"]}
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            for key in ("content", "reasoning", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    message[key] = message.get(key, "") + delta[key]
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call.get("index", 0), {"function": {"name": "", "arguments": ""}})
                for key, piece in (call.get("function") or {}).items():
                    if isinstance(piece, str) and key in slot["function"]:
                        slot["function"][key] += piece
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"choices": [{"message": message}]}


def tool_call_problem(message: Any) -> str | None:
    """What is wrong with an answer to the forced tool call; None when it called TOOL_NAME with
    arguments that are a JSON object of the schema's keys and types."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return "the answer has no tool call"
    function = calls[0].get("function") or {}
    if function.get("name") != TOOL_NAME:
        return f"the tool call names {function.get('name')!r}, not {TOOL_NAME!r}"
    text = function.get("arguments")
    try:
        # strict=False: the grammar lets raw control characters into a JSON string, and random
        # weights write them; a real model does not
        arguments = json.loads(text, strict=False) if isinstance(text, str) else None
    except ValueError:
        arguments = None
    schema = TOOL["function"]["parameters"]
    if not isinstance(arguments, dict):
        return f"its arguments are not a JSON object: {str(text)[:80]!r}"
    missing = [k for k in schema["required"] if k not in arguments]
    stray = [k for k in arguments if k not in schema["properties"]]
    wrong = [k for k, spec in schema["properties"].items()
             if k in arguments and not isinstance(arguments[k], _JSON_TYPES[spec["type"]])]
    if missing or stray or wrong:
        said = [f"{what} {', '.join(keys)}" for what, keys in (("missing", missing), ("not in the schema", stray),
                                                               ("of the wrong type", wrong)) if keys]
        return f"its arguments {json.dumps(arguments)[:80]} have keys {'; '.join(said)}"
    return None


@dataclass(frozen=True)
class _Check:
    ok: bool
    said: str  # "reasoning: ok", "tool call get_weather: FAILED, ...", "...: not checked, ..."


def _not_applying(what: str, task: str, parsers: Parsers, flag: str | None) -> _Check | None:
    if task != "generate":
        return _Check(True, f"{what}: not checked, the model's task is {task}")
    if parsers.differ:
        return _Check(True, f"{what}: not checked, the model's engines run different parsers")
    if flag is None:
        return _Check(True, f"{what}: not checked, no {'reasoning' if what == 'reasoning' else 'tool-call'} parser")
    return None


def _reasoning_check(task: str, parsers: Parsers, answer: Any) -> _Check:
    """The chat answer (asked with thinking on) carries the reasoning vLLM parsed out of it."""
    skip = _not_applying("reasoning", task, parsers, parsers.reasoning)
    if skip is not None:
        return skip
    if _reasoning_of(_message(answer)):
        return _Check(True, f"reasoning: ok ({parsers.reasoning})")
    return _Check(False, f"reasoning: FAILED, the chat answer has no reasoning (the engines run "
                         f"--reasoning-parser {parsers.reasoning})")


def _tool_call_check(ask: Callable[..., tuple[int, dict, dict[str, str]]], model: str, task: str,
                     parsers: Parsers) -> _Check:
    """The forced tool call, through the gateway. With a reasoning parser on, vLLM applies the
    call's grammar only after the reasoning ends, so the call is asked with thinking off; and
    streamed, because vLLM parses a whole answer's reasoning from its output alone (all of it
    before any `</think>`, even when the prompt closed the reasoning), while a stream starts
    after a prompt that closed it (vllm/parser/abstract_parser.py: parse, parse_delta)."""
    what = f"tool call {TOOL_NAME}"
    skip = _not_applying(what, task, parsers, parsers.tool_call)
    if skip is not None:
        return skip
    streamed = parsers.reasoning is not None
    body = tool_call_body(model, thinking_off=streamed)
    try:
        status, answer, _ = ask(body | {"stream": True}, read=assembled) if streamed else ask(body)
    except (OSError, ValueError) as exc:  # unreachable, timed out, or not the JSON it should be
        return _Check(False, f"{what}: FAILED, {exc}")
    error = answer.get("error") if isinstance(answer, dict) else None
    if status != 200 or error:
        message = error.get("message", "") if isinstance(error, dict) else str(error or "")
        return _Check(False, f"{what}: FAILED through the gateway: {status} {message}".rstrip())
    message = _message(answer)
    problem = tool_call_problem(message)
    if problem is None:
        return _Check(True, f"{what}: ok ({parsers.tool_call}{', streamed' if streamed else ''})")
    if streamed and _reasoning_of(message) and not message.get("tool_calls"):
        # Thinking off is a switch of the chat template; one without it (R1's) keeps the model
        # reasoning, and random weights never end it.
        return _Check(True, f"{what}: not checked, the model was still reasoning after "
                            f"{TOOL_MAX_TOKENS} tokens (its chat template did not switch thinking off)")
    return _Check(False, f"{what}: FAILED, {problem}")


def prove_host(endpoint_base: str, host: str, model: str, secret: str, timeout: float = 60,
               ca_file: Path | None = None, headers: Mapping[str, str] | None = None,
               task: str = "generate", expect_headers: Mapping[str, str] | None = None,
               parsers: Parsers | None = None) -> Proof:
    """One request of the model's `task` through the host's gateway (ASKS). `headers`: sent
    with it; `expect_headers`: the answer must carry them (a gray release's gate sends its stage
    header and checks which stage answered). With `parsers` (what the model's engines parse),
    also the reasoning and the forced tool call, each named in the detail with its result."""
    endpoint = f"{endpoint_base}/v1"
    ask = ASKS[task]
    ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    body = ask.body(model)
    if parsers is not None and parsers.reasoning and not parsers.differ and task == "generate":
        body["chat_template_kwargs"] = THINKING_ON

    def asked(sent: dict[str, Any], **how: Any) -> tuple[int, dict, dict[str, str]]:
        return _request(f"{endpoint}{ask.path}", secret, sent, timeout, ctx, headers, **how)

    try:
        status, _, _ = _request(f"{endpoint_base}/readyz", secret, None, 10, ctx)
        if status != 200:
            return Proof(host, endpoint, False, f"gateway /readyz answered {status}")
        start = time.monotonic()
        status, answer, got = asked(body)
        latency = (time.monotonic() - start) * 1000
        if status != 200 or not isinstance(answer, dict) or not ask.answered(answer):
            message = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
            return Proof(host, endpoint, False, f"{ask.failed} through the gateway: {status} {message}".rstrip())
        wrong = [f"{k}: {got.get(k.lower())!r} (wanted {v!r})" for k, v in (expect_headers or {}).items()
                 if got.get(k.lower()) != v]
        if wrong:
            return Proof(host, endpoint, False, f"{ask.done} answered with {', '.join(wrong)}")
        said = [f"{ask.done} via gateway in {latency:.0f} ms"]
        if parsers is not None:
            for check in (lambda: _reasoning_check(task, parsers, answer),
                          lambda: _tool_call_check(asked, model, task, parsers)):
                result = check()
                said.append(result.said)
                if not result.ok:
                    return Proof(host, endpoint, False, ", ".join(said), latency)
    except OSError as exc:
        problem = tls_problem(exc, endpoint_base, ca_file)
        return Proof(host, endpoint, False, problem or f"gateway unreachable: {exc}")
    return Proof(host, endpoint, True, ", ".join(said), latency)


def readyz(base: str, ctx: ssl.SSLContext | None, deployment: str, timeout: float = 5) -> dict[str, Any]:
    """A gateway's /readyz with its details (engines, outstanding requests, key file digests),
    which it shows only to the scrape token's holder; a 503 still carries the body."""
    from installer.base.paths import resolve_state_dir
    from installer.secrets.secret_files import metrics_token_file

    # Looked up, not made: `installer status` reads and must leave no empty state folder behind.
    path = metrics_token_file(deployment, resolve_state_dir()[0])
    token = path.read_text().strip() if path.is_file() else ""
    req = urllib.request.Request(f"{base}/readyz", headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as exc:
        try:
            return dict(json.load(exc))
        except ValueError:  # not the gateway's JSON (a proxy's page)
            return {"status": f"HTTP {exc.code}", "engines": {}}


def gateway_base(inv: Inventory, address: str) -> str:
    """The URL clients use for a host's gateway, by the inventory's TLS setting."""
    scheme = "http" if inv.tls.mode == "off" else "https"
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{inv.ports.gateway}"


def ca_file(inv: Inventory) -> Path | None:
    """The CA that clients on this machine verify the gateways with; None when TLS is off."""
    if inv.tls.mode == "off":
        return None
    return tls_store.host_files(inv, inv.hosts[0].name).ca


def prove(inv: Inventory, secret: str, engines: Iterable[EngineArgv] | None = None) -> list[Proof]:
    """One proof per serving host: every model the host serves answered through its gateway
    (the first failure stops the host's round). With several models, each part of the
    detail names its model. With `engines` (the deployment plan's), each chat model's
    reasoning and forced tool call too, by what its engines parse (prove_host)."""
    ca = ca_file(inv)
    models = inv.served_models()
    parsers = parsers_by_model(engines) if engines is not None else None

    def one(host) -> Proof:  # type: ignore[no-untyped-def]
        base = gateway_base(inv, host.address)
        mine = [m for m in models if host.name in m.hosts] or [models[0]]
        proofs: list[Proof] = []
        for m in mine:
            proof = prove_host(base, host.name, m.served_name, secret, ca_file=ca, task=m.task,
                               parsers=None if parsers is None else parsers.get(m.served_name, Parsers()))
            if len(mine) > 1:
                proof = replace(proof, detail=f"{m.served_name}: {proof.detail}")
            proofs.append(proof)
            if not proof.ok:
                return proof
        return Proof(host.name, proofs[0].endpoint, True, "; ".join(p.detail for p in proofs), proofs[0].latency_ms)

    return remote.each([h for h in inv.hosts if "serving" in h.groups], one)
