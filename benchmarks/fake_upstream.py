"""A fast OpenAI-compatible upstream (aiohttp) standing in for vLLM in tests and benchmarks.

    python benchmarks/fake_upstream.py --port 9001 --model tiny [--chunks 16] [--delay-ms 0]

Each completion streams `chunks` one-word tokens. A request may steer its own answer with an
`x_fake` object: {"chunks": N, "delay_ms": D, "status": S}, and misbehave as an engine might
(tests/integration/test_gateway_upstream_faults.py): "body" (answer this JSON with `status`),
"usage" (report this usage object), "tail" (raw SSE text sent after the tokens), "no_done"
(end the stream without [DONE]), "not_http" (answer bytes that are not HTTP), "stall_s" (send
nothing for this long: no headers, or for a stream no event), "finish_reason" (end with this
one). `--chat-fake JSON` is the x_fake of every chat request that sends none: an engine that
fails its clients while passing the gateway's readiness checks (/v1/completions).

Answers are deterministic, as greedy decoding is: the i-th token is always " tok<i>", and a
request that continues an answer (a chat whose last message is the assistant's with
`continue_final_message`, or a completion prompt ending in " tok0 tok1 ...") goes on from the
token after the last one given, so a resumed answer can be compared with one engine's whole
answer (service/stream_resume.py). `--die-after N` (or x_fake "die_after") drops the connection
of a fresh stream after N tokens, as an engine that crashes does; "die_resumed_after" does the
same to a continuing one, and "stall_resumed_s" holds a continuing one before its first token.
A chat answer may reason and call a tool as vLLM's deepseek_v3 parsers stream them: x_fake
"think" R makes tokens 0..R-1 reasoning and token R the `</think>` (no delta, counted in the
usage) when `chat_template_kwargs` switches thinking on, and the parser's state in a continuation
follows its prompt as vLLM's does (_deltas); "tool_call_at" T makes tokens T and T+1 a tool
call's deltas, which end the answer.
`stream_options.continuous_usage_stats` puts the usage so far in every chunk, as vLLM does, and
`--role-chunk` opens a chat stream with vLLM's chunk that carries only the role. GET /_stats
reports what the server saw (requests, streams started/completed/aborted, the last body and
trace headers), so tests can check what the gateway sent and that it closed a stream when its
client left.
/v1/rerank and /v1/score answer in vLLM's shapes, a pair's score being the share of the
document's words found in the query.
"""

import argparse
import asyncio
import json
import re
import time
from typing import Any

import uvloop
from aiohttp import web

STATS_KEY = web.AppKey("stats", dict)
OPTS_KEY = web.AppKey("opts", argparse.Namespace)
_CACHE: dict[tuple[Any, ...], list[bytes]] = {}
_TOKEN = re.compile(r" tok(\d+)")


def _continued_from(body: dict[str, Any], chat: bool) -> tuple[int, str]:
    """How many tokens of the answer the request already carries (0: a fresh request), and the
    text it continues ("" for a fresh one)."""
    if chat:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if not (body.get("continue_final_message") and last.get("role") == "assistant"):
            return 0, ""
        text = str(last.get("content") or "")
    else:
        prompt = body.get("prompt", "")
        text = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else str(prompt)
    # The longest tail " tok<a> tok<a+1> ... tok<k-1>" of the text (a is 0 but where a
    # continuation holds only the content after the reasoning).
    words = [int(w) for w in _TOKEN.findall(text)]
    for n in range(len(words), 0, -1):
        run = words[-n:]
        if run == list(range(run[0], run[0] + n)) and text.endswith("".join(f" tok{i}" for i in run)):
            return run[-1] + 1, text
    return 0, text


def _thinking(body: dict[str, Any]) -> bool:
    """vLLM's deepseek_v3 reasoning parser files reasoning only with thinking switched on."""
    kwargs = body.get("chat_template_kwargs") or {}
    return bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))


def _deltas(start: int, end: int, think: int | None, thinking: bool, continued: str,
            tool_at: int | None) -> list[tuple[dict[str, Any] | None, int]]:
    """A chat answer's deltas for tokens start..end-1, each with the tokens generated so far
    (None: a token vLLM's parser sends nothing for).

    With `think` R, the model writes its reasoning as tokens 0..R-1, `</think>` as token R and its
    answer after it; the parser files tokens as vLLM's does: with thinking on, as reasoning until
    `</think>` unless the prompt (here `continued`, the final assistant message) already ended
    the reasoning (`</think>` after its last `<think>`, vllm is_reasoning_end). With `tool_at` T,
    tokens T and T+1 are a tool call's deltas, as vLLM's tool parser streams them."""
    reasoning = thinking and continued.rfind("</think>") <= continued.rfind("<think>")
    out: list[tuple[dict[str, Any] | None, int]] = []
    for i in range(start, end):
        done = i - start + 1
        if think is not None and i == think and thinking:
            reasoning = False
            out.append((None, done))  # the lone `</think>`: vLLM's parser sends no delta
        elif tool_at is not None and i == tool_at:
            out.append(({"tool_calls": [{"index": 0, "id": "call_fake", "type": "function",
                                         "function": {"name": "lookup", "arguments": ""}}]}, done))
        elif tool_at is not None and i == tool_at + 1:
            out.append(({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": "tok"}'}}]}, done))
        else:
            out.append(({"reasoning_content" if reasoning else "content": f" tok{i}"}, done))
    return out


def _events(
    kind: str, model: str, start: int, end: int, finish: str, role_chunk: bool = False, prompt: int | None = None,
    shape: tuple[int | None, bool, str, int | None] = (None, False, "", None),
) -> list[bytes]:
    """The SSE events of tokens start..end-1 of an answer, built once per shape (the server must
    be cheap); with `prompt` (the prompt's tokens), each carries the usage so far. `shape`: the
    reasoning and tool call of a chat answer (_deltas)."""
    key = (kind, model, start, end, finish, role_chunk, prompt, shape)
    if key not in _CACHE:
        created = int(time.time())
        out = []
        steps: list[tuple[dict[str, Any] | None, int]] = [(None, 0)] if role_chunk and kind == "chat" else []
        if kind == "chat":
            steps += [(d, n) for d, n in _deltas(start, end, *shape) if d is not None or n == end - start]
        else:
            steps += [({"content": f" tok{i}"}, i - start + 1) for i in range(start, end)]
        for n, (delta, done) in enumerate(steps):
            last = n == len(steps) - 1
            if kind == "chat":
                if n == 0 and role_chunk:  # vLLM's first chunk: the role, no token
                    delta = {"role": "assistant", "content": ""}
                elif n == 0:
                    delta = {"role": "assistant", **(delta or {})}
                obj: dict[str, Any] = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish if last else None}],
                }
            else:
                assert delta is not None
                obj = {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "text": delta["content"], "finish_reason": finish if last else None}],
                }
            if prompt is not None:
                obj["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done}
            out.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
        _CACHE[key] = out
    return _CACHE[key]


def _prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) + 4 for m in body["messages"])
    prompt = body.get("prompt", body.get("input", ""))
    return len(prompt) if isinstance(prompt, list) else len(str(prompt).split())


async def generate(request: web.Request) -> web.StreamResponse:
    stats, opts = request.app[STATS_KEY], request.app[OPTS_KEY]
    stats["requests"] += 1
    raw = await request.read()
    stats["last_body"] = raw.decode()
    trace = {h: request.headers[h] for h in ("traceparent", "tracestate") if h in request.headers}
    if trace:  # the gateway's own checks carry none: one between a test's request and its read erased it
        stats["last_trace_headers"] = trace
    body = json.loads(raw)
    chat = request.path.endswith("chat/completions")
    fake = body.get("x_fake", opts.chat_fake if chat else {})
    if fake.get("stall_s") and not body.get("stream"):
        await asyncio.sleep(fake["stall_s"])
    if fake.get("not_http"):
        assert request.transport is not None
        request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n")
        request.transport.close()
        return web.Response()  # not sent: the connection is closed
    if "body" in fake:
        return web.json_response(fake["body"], status=fake.get("status", 200))
    if status := fake.get("status", opts.status):
        return web.json_response(
            {"error": {"message": "fake failure", "type": "server_error", "code": None}},
            status=status,
        )
    model = body.get("model", "?")
    if model not in opts.model:
        return web.json_response(
            {
                "object": "error",
                "message": f"The model `{model}` does not exist.",
                "type": "NotFoundError",
                "code": 404,
            },
            status=404,
        )
    kind = "chat" if request.path.endswith("chat/completions") else "text"
    if chat and body.get("continue_final_message") and body.get("add_generation_prompt", True):
        return web.json_response(  # as vLLM refuses it
            {"error": {"message": "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                       "type": "BadRequestError", "code": 400}},
            status=400,
        )
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 1 << 30
    start, continued = _continued_from(body, chat)
    if start:
        stats["continuations"] += 1
        stats["last_continuation"] = raw.decode()
        stats["last_continuation_at"] = time.time()
    end = min(fake.get("chunks", opts.chunks), start + max_tokens)
    tool_at = fake.get("tool_call_at") if chat else None
    if tool_at is not None:
        end = min(end, tool_at + 2)  # the call ends the answer
    chunks = max(end - start, 0)
    finish = fake.get("finish_reason", "length" if chunks == max_tokens else "tool_calls" if tool_at is not None
                      else "stop")
    shape = (fake.get("think") if chat else None, chat and _thinking(body), continued, tool_at)
    delay = fake.get("delay_ms", opts.delay_ms) / 1000
    usage = fake.get("usage") or {
        "prompt_tokens": _prompt_tokens(body),
        "completion_tokens": chunks,
        "total_tokens": _prompt_tokens(body) + chunks,
    }
    if not body.get("stream"):
        if delay:
            await asyncio.sleep(delay * chunks)
        text = "".join(f" tok{i}" for i in range(start, end))
        choice = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
            if kind == "chat"
            else {"index": 0, "text": text, "finish_reason": finish}
        )
        return web.json_response(
            {
                "id": "fake",
                "object": "chat.completion" if kind == "chat" else "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": usage,
            }
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    stats["streams_started"] += 1
    try:
        if fake.get("stall_s"):
            await asyncio.sleep(fake["stall_s"])
        if start and fake.get("stall_resumed_s"):
            # Watching the connection: aiohttp does not cancel a handler whose client left.
            until = time.monotonic() + fake["stall_resumed_s"]
            while time.monotonic() < until:
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError("the client left")
                await asyncio.sleep(0.05)
        options = body.get("stream_options") or {}
        continuous = options.get("include_usage") and options.get("continuous_usage_stats")
        events = _events(kind, model, start, end, finish, opts.role_chunk,
                         _prompt_tokens(body) if continuous else None, shape)
        die = fake.get("die_resumed_after") if start else fake.get("die_after", opts.die_after)
        lead = 1 if opts.role_chunk and kind == "chat" else 0  # the role chunk is no token
        for n, event in enumerate(events):
            if die is not None and n - lead >= die:
                # An engine that crashes: the connection drops mid-stream, no [DONE].
                stats["streams_died"] += 1
                stats["last_died"] = raw.decode()
                assert request.transport is not None
                request.transport.abort()
                return resp
            if delay:
                await asyncio.sleep(delay)
            await resp.write(event)
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = {
                "id": "fake",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [],
                "usage": usage,
            }
            await resp.write(b"data: " + json.dumps(tail).encode() + b"\n\n")
        for raw in fake.get("tail", ()):
            await resp.write(raw.encode())
        if not fake.get("no_done"):
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        stats["streams_aborted"] += 1
        raise
    stats["streams_completed"] += 1
    return resp


async def embeddings(request: web.Request) -> web.Response:
    request.app[STATS_KEY]["requests"] += 1
    body = await request.json()
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    tokens = _prompt_tokens(body)
    return web.json_response(
        {
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]}
                for i in range(len(inputs))
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _relevance(query: Any, document: Any) -> float:
    # Deterministic and query-dependent: the share of the document's words found in the query.
    words = str(document).split()
    return round(sum(w in str(query).split() for w in words) / max(len(words), 1), 6)


async def _counted_body(request: web.Request) -> Any:
    """The request's JSON body, the request counted and its body kept for the test to read."""
    stats = request.app[STATS_KEY]
    stats["requests"] += 1
    raw = await request.read()
    stats["last_body"] = raw.decode()
    return json.loads(raw)


async def rerank(request: web.Request) -> web.Response:
    """vLLM's /v1/rerank answer (entrypoints/pooling/scoring/protocol.py RerankResponse)."""
    body = await _counted_body(request)
    docs = _listed(body["documents"])
    tokens = sum(len(str(body["query"]).split()) + len(str(d).split()) for d in docs)
    results = sorted(
        (
            {
                "index": i,
                "document": {"text": d if isinstance(d, str) else None},
                "relevance_score": _relevance(body["query"], d),
            }
            for i, d in enumerate(docs)
        ),
        key=lambda r: -r["relevance_score"],
    )
    top_n = body.get("top_n") or len(results)
    return web.json_response(
        {
            "id": "rerank-fake",
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": results[:top_n],
        }
    )


async def score(request: web.Request) -> web.Response:
    """vLLM's /v1/score answer (ScoreResponse): text_1 against each text_2 (or pairwise)."""
    body = await _counted_body(request)
    first, second = next(
        (_listed(body[a]), _listed(body[b]))
        for a, b in (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))
        if a in body and b in body
    )
    pairs = list(zip(first * len(second) if len(first) == 1 else first, second, strict=True))
    tokens = sum(len(str(q).split()) + len(str(d).split()) for q, d in pairs)
    return web.json_response(
        {
            "id": "score-fake",
            "object": "list",
            "created": int(time.time()),
            "model": body["model"],
            "data": [{"index": i, "object": "score", "score": _relevance(q, d)} for i, (q, d) in enumerate(pairs)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }
    )


async def models(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                for m in request.app[OPTS_KEY].model
            ],
        }
    )


async def health(request: web.Request) -> web.Response:
    request.app[STATS_KEY]["health_checks"] += 1
    opts = request.app[OPTS_KEY]
    if getattr(opts, "health_hang", False):  # a driver stuck on a lost Ray worker: no answer
        await asyncio.sleep(3600)
    return web.Response(text="", status=getattr(opts, "health_status", 200))


async def set_health(request: web.Request) -> web.Response:
    """POST /_health {"status": N} or {"hang": true}: how /health answers from now on (vLLM's
    answers 503 once its engine core died, e.g. after a Ray worker of its pipeline was lost)."""
    body = await request.json()
    request.app[OPTS_KEY].health_status = int(body.get("status", 200))
    request.app[OPTS_KEY].health_hang = bool(body.get("hang", False))
    return web.Response(text="")


async def set_status(request: web.Request) -> web.Response:
    """POST /_status {"status": N}: every generation from now on answers N (0: as asked)."""
    request.app[OPTS_KEY].status = int((await request.json())["status"])
    return web.Response(text="")


async def stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATS_KEY])


def make_app(opts: argparse.Namespace) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[OPTS_KEY] = opts
    app[STATS_KEY] = {
        "requests": 0,
        "streams_started": 0,
        "streams_completed": 0,
        "streams_aborted": 0,
        "streams_died": 0,  # dropped on purpose (--die-after, die_after, die_resumed_after)
        "continuations": 0,  # requests that continued an answer they carried
        "last_continuation": None,  # the last one's body
        "last_continuation_at": 0.0,  # when it came (time.time()), to tell which engine had the latest
        "last_died": None,  # the body of the last stream dropped on purpose
        "last_body": None,
        "last_trace_headers": {},  # the last generation's traceparent and tracestate that carried any
        "health_checks": 0,
    }
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/rerank", rerank)
    app.router.add_post("/v1/score", score)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/_stats", stats)
    app.router.add_post("/_status", set_status)
    app.router.add_post("/_health", set_health)
    return app


def build_parser() -> argparse.ArgumentParser:
    """The command line; tests that serve the app themselves parse their options with it, so a
    new option never leaves them with a half-filled namespace."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--model", action="append", required=True, help="served model name (repeatable)"
    )
    parser.add_argument("--chunks", type=int, default=16, help="tokens per answer")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="pause before each token")
    parser.add_argument(
        "--status", type=int, default=0, help="answer every generation with this status"
    )
    parser.add_argument(
        "--die-after", type=int, default=None, help="drop a fresh stream's connection after N tokens"
    )
    parser.add_argument(
        "--role-chunk", action="store_true", help="open chat streams with a role-only chunk, as vLLM"
    )
    parser.add_argument(
        "--chat-fake", type=json.loads, default={}, help="x_fake of chat requests that send none"
    )
    return parser


def main() -> None:
    opts = build_parser().parse_args()
    web.run_app(
        make_app(opts),
        host=opts.host,
        port=opts.port,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )


if __name__ == "__main__":
    main()
