"""Relaying one request to an engine: pick, send, retry once before the first byte, stream.

During a gray release (service/stages.py) a request is first sent to the stage its caller
belongs to; a canary attempt that fails before its first byte (refused, 5xx, or silent past
the first-byte timeout) is retried on a stable engine, on top of the usual one retry, so the
client sees only stable's answer. Every attempt is counted by stage and outcome; a 200 from
a generating engine with no output or an unexpected finish_reason is a `bad_output`.

Bytes are relayed as they arrive, cut only at SSE event boundaries; a block is parsed only if
it carries a `"usage"` object, which is how token accounting works without reading every
chunk. When the client did not ask for usage in a stream, the gateway asks the engine for it
and drops that one event on the way back.
"""

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.accesslog import RequestInfo
from service.auth import ANONYMOUS, ApiKey
from service.choices import choices
from service.errors import GatewayError, error_bytes, send_error
from service.evidence import FORCED, KEY_SHARE, EvidenceCap
from service.limits import Limiter
from service.metrics import Metrics
from service.routing import Engine, Router
from service.stages import STABLE
from service.stream_resume import StreamResume, take_over
from service.tracing import TRACE_HEADERS, RequestTracer
from service.usage import NullLedger, Ticket, UsageLedger

log = logging.getLogger("service.proxy")

# 503 is an engine saying it cannot serve now; 500/502/504 may be about this one request.
_RETRY_STATUS = frozenset({500, 502, 503, 504})
_UNHEALTHY_STATUS = frozenset({503})
_SSE_END = b"\n\n"
_SSE_DONE = b"data: [DONE]\n\n"
_MAX_TOKENS = 1 << 31
_FINISHED = frozenset({"stop", "length", "tool_calls"})
# Found in the raw events, so a stream's chunks are not parsed one by one: a non-empty
# content/text/reasoning string or a tool call, and every finish_reason that is not null (a
# string value's own quotes are escaped, so these never match inside one). Reasoning is output:
# with a reasoning parser, vLLM sends a model's thinking as `reasoning` (`reasoning_content`,
# its older name), and a short answer may be all thinking.
_OUTPUT = re.compile(rb'"(?:content|text|reasoning|reasoning_content)":\s*"[^"]|"tool_calls":\s*\[\s*\{')
_SAID = ("content", "text", "reasoning", "reasoning_content", "tool_calls")
_FINISH = re.compile(rb'"finish_reason":\s*"([^"]*)"')


@dataclass(slots=True)
class Upstream:
    """What every relay shares: the pooled client and the gateway's routing and accounting."""

    session: aiohttp.ClientSession
    router: Router
    limiter: Limiter
    metrics: Metrics
    timeout: aiohttp.ClientTimeout
    usage: UsageLedger = NullLedger()  # noqa: RUF009  (stateless, so one instance may be shared)
    stage_header: bytes = b"x-release-stage"  # lower case, as ASGI gives header names
    canary_first_byte_timeout_s: float = 10.0  # a streamed canary answer's first byte
    canary_answer_timeout_s: float = 120.0  # a whole canary answer (vLLM sends it all at once)
    first_byte_timeout_s: float = 60.0  # any other streamed attempt's first byte
    answer_timeout_s: float = 300.0  # any other whole answer
    evidence: EvidenceCap = EvidenceCap(60.0, 20, 0.25)  # noqa: RUF009  (replaced per gateway)
    tracer: RequestTracer | None = None  # None: tracing off, the client's trace headers pass through


def delivery_trace() -> aiohttp.TraceConfig:
    """Marks a relayed request delivered once its headers went out to the engine (the body
    follows in the same write): from then on the engine may be working on it (_settle)."""
    trace = aiohttp.TraceConfig()

    async def sent(_session: aiohttp.ClientSession, ctx: Any, _params: Any) -> None:
        call = ctx.trace_request_ctx
        if isinstance(call, ProxyCall):
            call.delivered = True

    trace.on_request_headers_sent.append(sent)
    return trace


async def _chain(first: list[bytes], rest: Any) -> Any:
    for chunk in first:
        yield chunk
    async for chunk in rest:
        yield chunk


class _Retry(Exception):
    def __init__(self, error: GatewayError) -> None:
        self.error = error


def _usage_in(obj: Any) -> dict[str, Any] | None:
    usage = obj.get("usage") if isinstance(obj, dict) else None
    return usage if isinstance(usage, dict) else None


def _count(value: Any) -> int | None:
    """A token count as the engine should send it: a non-negative int of sane size."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_TOKENS:
        return value
    return None


def _relayed_status(status: int) -> bool:
    """What is relayed as the engine said it: success and client errors (a redirect, or a
    code HTTP does not define, is an engine fault)."""
    return 200 <= status < 300 or 400 <= status < 600


def _content_type(resp: aiohttp.ClientResponse) -> bytes:
    value = resp.headers.get("Content-Type", "")
    return value.encode() if value and value.isascii() and value.isprintable() else b"application/json"


def normalize_error(status: int, body: bytes) -> bytes:
    """Any engine error body in OpenAI's shape, with a string message and type whatever came:
    OpenAI's own (kept as it is), older vLLM's {"message", "type", ...}, {"error": "text"},
    fields missing or of the wrong type, HTML from a proxy, or nothing."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        obj = None
    fields = obj if isinstance(obj, dict) else {}
    error = fields.get("error")
    if isinstance(error, dict):
        if isinstance(error.get("message"), str) and isinstance(error.get("type"), str):
            return body
        fields = error
    message = error if isinstance(error, str) else fields.get("message")
    if not isinstance(message, str) or not message:
        message = body[:500].decode(errors="replace").strip() or f"engine answered HTTP {status}"
    type_ = fields.get("type")
    if not isinstance(type_, str) or not type_:
        type_ = "server_error" if status >= 500 else "invalid_request_error"
    code, param = fields.get("code"), fields.get("param")
    return error_bytes(
        message,
        type_,
        str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
        param if isinstance(param, str) else None,
    )


class ProxyCall(Response):
    """An ASGI response that performs the upstream exchange itself, so it can retry before
    anything is sent and abort the engine's work when the client goes away."""

    def __init__(
        self,
        upstream: Upstream,
        info: RequestInfo,
        key: ApiKey,
        path: str,
        body: bytes,
        model: str,
        strip_usage: bool,
        reserved_tokens: int,
        session_id: str | None,
        ticket: Ticket | None = None,
        resume: StreamResume | None = None,
    ) -> None:
        self.up = upstream
        self.ticket = ticket
        self.resume = resume  # a stream's failover state (service/stream_resume.py)
        self.info = info
        self.key = key
        self.path = path
        self.body = body
        self.model = model
        self.strip_usage = strip_usage
        self.reserved = reserved_tokens
        self.session_id = session_id
        self.headers_out = {"Content-Type": "application/json", "X-Request-Id": info.request_id}
        self.done = False  # the response is complete; a later "disconnect" is just the end
        self.disconnected = False
        self.status: int | None = None  # the engine's status, once relayed
        self.events = 0  # a stream's data events relayed to the client: the floor of what it read
        self.background = None  # Starlette's Response attributes that FastAPI reads
        self.status_code = 200
        self.asked_stage: str | None = None  # the stage header's value, if the key may send it
        self.stage: str | None = None  # the stage of the engine last tried (the span's attribute)
        self.delivered = False  # the current attempt's request reached an engine
        # The attempt under way: a canary attempt's first-byte deadline (None: none), when it
        # started, its first byte, how it ended, and what its stream said so far.
        self.guard: asyncio.Timeout | None = None
        self.attempt_start = 0.0
        self.attempt_ttft: float | None = None
        self.outcome = "error"
        self.said = False
        self.finishes: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tester, carrier = self.key.release_tester, {}
        for name, value in scope["headers"]:
            if name in TRACE_HEADERS:
                carrier[name.decode()] = value.decode("latin-1")
            elif tester and name == self.up.stage_header:  # anyone else's would steer the release
                self.asked_stage = value.decode("latin-1").strip().lower() or None
        tracer, span = self.up.tracer, None
        if tracer is not None:
            span, onward = tracer.start(self.path, carrier, self.info.start)
            self.headers_out.update(onward)
        elif carrier:
            self.headers_out.update(carrier)  # as the client sent them: the engine's trace is the client's
        try:
            task = asyncio.current_task()
            assert task is not None
            watcher = asyncio.create_task(self._watch(receive, task))
            try:
                await self._run(send)
            except asyncio.CancelledError:
                if not self.disconnected:
                    raise
                task.uncancel()
                self.info.error = "client_disconnected"
            finally:
                self.done = True
                watcher.cancel()
            await self._settle()
        finally:
            if tracer is not None:
                self._end_span(tracer, span)

    def _end_span(self, tracer: RequestTracer, span: Any) -> None:
        info = self.info
        tracer.finish(
            span, model=self.model, stage=self.stage, key_id=self.key.name, engine=info.engine,
            attempts=info.attempts, status=self.status, error=info.error,
            prompt_tokens=info.prompt_tokens, completion_tokens=info.completion_tokens,
        )

    async def _watch(self, receive: Receive, task: asyncio.Task[Any]) -> None:
        # Cancelling the request's task closes the upstream connection wherever it is
        # (connecting, waiting for headers, streaming), which is what makes vLLM abort. The
        # CancelledError is delivered at the await the task is suspended in, so it is the only
        # way a disconnect shows up in _run.
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.done:
            self.disconnected = True
            task.cancel()

    async def _run(self, send: Send) -> None:
        router = self.up.router
        stage = router.stage_for(self.model, self.key.name, self.session_id, self.asked_stage)
        tried: tuple[Engine, ...] = ()
        error: GatewayError | None = None
        retries = 1
        while True:
            # The stage's engines, or any other (a stage with none ready left is not an outage).
            engine = router.pick(self.model, tried, self.session_id, stage) or router.pick(
                self.model, tried, self.session_id, None
            )
            if engine is None:
                break
            # A canary attempt before stable's is extra: stable keeps its own retry after it.
            canary_first = stage != STABLE and engine.stage != STABLE
            tried += (engine,)
            self.info.attempts, self.info.engine, self.stage = len(tried), engine.name, engine.stage
            self.info.stage = engine.stage
            router.begin(engine)
            try:
                await self._attempt(engine, send, canary_first)
                return
            except _Retry as retry:
                error = retry.error
            finally:
                router.end(engine)
            if canary_first:
                stage = STABLE
            elif retries:
                retries -= 1
            else:
                break
        await self._fail(
            send,
            error
            or GatewayError(
                503,
                f"No healthy engine is serving model '{self.model}'.",
                "server_error",
                "no_healthy_engine",
                {"Retry-After": "1"},
            ),
        )

    async def _attempt(self, engine: Engine, send: Send, canary_first: bool) -> None:
        """One exchange, counted by stage, with a deadline for its first byte (a whole answer's
        first byte is its end; a canary's is shorter) and retried whatever fails before it."""
        self.attempt_start, self.attempt_ttft, self.outcome = time.perf_counter(), None, "error"
        self.said, self.finishes, self.delivered = False, [], False
        limit = self._canary_deadline() if canary_first else self._deadline()
        try:
            async with asyncio.timeout(limit) as guard:
                self.guard = guard
                if self.info.stream:
                    # Whole answers are slow by nature (their first byte is their end): only
                    # streams' first bytes tell a wedged engine (Engine.stalled).
                    engine.waiting[self] = (time.monotonic(), guard)
                await self._exchange(engine, send)
        except TimeoutError:
            if not guard.expired() or self.attempt_ttft is not None:
                raise
            self.attempt_ttft = limit
            self._engine_error(engine, "first_byte_timeout", down=False)
            raise _Retry(
                GatewayError(
                    504, f"Engine '{engine.name}' sent nothing in {limit} s.", "server_error",
                    "upstream_timeout",
                )
            ) from None
        finally:
            self.guard = None
            engine.waiting.pop(self, None)
            if not self.disconnected:
                self._count_attempt(engine)
            elif self.attempt_ttft is None:
                # The client gave up waiting for the first byte: a failure of the stage (a canary
                # slower than its callers' patience must still reach a verdict), at its elapsed
                # time. One that left after it is not counted (the answer was under way).
                self.outcome, self.attempt_ttft = "error", time.perf_counter() - self.attempt_start
                self._count_attempt(engine)

    def _deadline(self) -> float:
        return self.up.first_byte_timeout_s if self.info.stream else self.up.answer_timeout_s

    def _canary_deadline(self) -> float:
        split = self.up.router.stages.split(self.model)
        if self.info.stream:
            return split.first_byte_timeout_s or self.up.canary_first_byte_timeout_s
        return split.answer_timeout_s or self.up.canary_answer_timeout_s

    def _first_byte(self, engine: Engine) -> None:
        """The attempt's first byte is in: no deadline any more, its TTFT, and the engine is
        making progress."""
        if self.guard is not None:
            self.guard.reschedule(None)
        self.attempt_ttft = time.perf_counter() - self.attempt_start
        engine.waiting.pop(self, None)
        engine.last_progress = time.monotonic()

    def _count_attempt(self, engine: Engine) -> None:
        m, labels = self.up.metrics, (self.model, engine.stage)
        unjudged = self._unjudged(engine)
        if unjudged is not None:
            m.unjudged_requests.labels(*labels, self.outcome, unjudged).inc()
            return
        m.stage_requests.labels(*labels, self.outcome).inc()
        if self.attempt_ttft is not None:
            m.stage_ttft.labels(*labels).observe(self.attempt_ttft)
        m.stage_seconds.labels(*labels).observe(time.perf_counter() - self.attempt_start)

    def _unjudged(self, engine: Engine) -> str | None:
        """Why this attempt is left out of the release figures, if it is (service/evidence.py)."""
        if self.asked_stage is not None:
            return FORCED
        if self.key is not ANONYMOUS and not self.up.evidence.admit(self.model, engine.stage, self.key.name):
            return KEY_SHARE
        return None

    def _judge(self, engine: Engine, status: int) -> str:
        """error for a 5xx, client_error for a 4xx (relayed: another engine would say the same,
        but a canary's share of them is compared with stable's), bad_output for a generating
        engine's 200 with no output (text, content, reasoning or a tool call) or a finish_reason
        other than stop, length or tool_calls
        (from what the answer said: self.said/finishes), else ok."""
        if status >= 500:
            return "error"
        if status >= 400:
            return "client_error"
        if status != 200 or engine.task != "generate" or not self.path.endswith("completions"):
            return "ok"
        if not self.said or not self.finishes:
            return "bad_output"
        return "ok" if all(f.decode(errors="replace") in _FINISHED for f in self.finishes) else "bad_output"

    def _read_answer(self, data: bytes) -> None:
        """What a whole (not streamed) generation said."""
        for choice in choices(data):
            message = choice.get("message")
            out = message if isinstance(message, dict) else choice
            if any(out.get(field) for field in _SAID):
                self.said = True
            finish = choice.get("finish_reason")
            self.finishes.append(finish.encode() if isinstance(finish, str) else b"null")

    def _start(self, status: int, content_type: bytes, engine: Engine, *extra: tuple[bytes, bytes]) -> dict[str, Any]:
        """The response's start, naming the stage that answered (release gates check it)."""
        headers = [(b"content-type", content_type), *extra, (self.up.stage_header, engine.stage.encode())]
        return {"type": "http.response.start", "status": status, "headers": headers}

    def _engine_error(self, engine: Engine, reason: str, down: bool) -> None:
        """Count an engine's failure; if it looks down, route around it until a check passes.
        Either way its next check is a real request: /health would not see a failing generation."""
        self.up.metrics.upstream_errors.labels(engine.name, reason).inc()
        engine.suspect()
        if down and engine.healthy:
            log.warning("engine %s taken out of rotation: %s", engine.name, reason)
            engine.mark_failed()

    async def _timed_out(self, engine: Engine, send: Send) -> None:
        self._engine_error(engine, "timeout", down=False)
        message = f"Engine '{engine.name}' did not answer in time."
        error = GatewayError(504, message, "server_error", "upstream_timeout")
        if self.attempt_ttft is None:
            raise _Retry(error)  # nothing was sent: another engine answers instead
        await self._fail(send, error)

    async def _fail(self, send: Send, error: GatewayError) -> None:
        self.info.error = error.code
        self.done = True  # set before sending: the end of the response is not a disconnect
        await send_error(send, error)

    async def _exchange(self, engine: Engine, send: Send) -> None:
        up = self.up
        try:
            resp = await up.session.post(
                engine.url + self.path,
                data=self.body,
                headers=self.headers_out,
                timeout=up.timeout,
                allow_redirects=False,  # an engine does not redirect; if it does, that is a fault
                trace_request_ctx=self,
            )
        except aiohttp.SocketTimeoutError:
            # No response headers within the upstream timeout: before a first byte, retried.
            await self._timed_out(engine, send)
            return
        except aiohttp.ClientConnectionError as exc:
            # Refused or unreachable: the engine is down. A dropped pooled connection is not.
            down = isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)
            self._engine_error(engine, "connect", down)
            raise _Retry(
                GatewayError(
                    502,
                    f"Engine '{engine.name}' is unreachable: {type(exc).__name__}.",
                    "server_error",
                    "upstream_unreachable",
                )
            ) from exc
        except aiohttp.ClientError as exc:
            # An answer that is not HTTP (ClientResponseError: a bad status line or header).
            self._engine_error(engine, "bad_response", down=False)
            message = f"invalid response ({type(exc).__name__})"
            raise _Retry(self._upstream_error(engine, message)) from exc
        try:
            if resp.status in _RETRY_STATUS or not _relayed_status(resp.status):
                try:
                    body = await resp.read()
                except (aiohttp.ClientError, TimeoutError):
                    body = b""
                engine.last_progress = time.monotonic()  # it answers, if not well
                self._engine_error(engine, f"http_{resp.status}", resp.status in _UNHEALTHY_STATUS)
                message = json.loads(normalize_error(resp.status, body))["error"]["message"]
                raise _Retry(self._upstream_error(engine, message))
            if resp.status < 300:
                engine.mark_ok()
            else:  # a client's 4xx: the engine answered, but generated nothing
                engine.mark_alive()
            self.status = resp.status
            content_type = _content_type(resp)
            if resp.status == 200 and content_type.startswith(b"text/event-stream"):
                await self._relay_stream(resp, engine, send, content_type)
            else:
                await self._relay_whole(resp, engine, send, content_type)
        finally:
            if self.done and not self.disconnected:
                resp.release()  # back to the pool
            else:
                resp.close()  # the engine sees the connection drop and aborts the request

    @staticmethod
    def _upstream_error(engine: Engine, message: str) -> GatewayError:
        return GatewayError(
            502, f"Engine '{engine.name}' failed: {message}", "server_error", "upstream_error"
        )

    async def _relay_whole(
        self, resp: aiohttp.ClientResponse, engine: Engine, send: Send, content_type: bytes
    ) -> None:
        try:
            data = await resp.read()
        except aiohttp.SocketTimeoutError:
            await self._timed_out(engine, send)
            return
        except aiohttp.ClientError as exc:
            # Nothing was sent yet, so another engine may still answer.
            self._engine_error(engine, "body_broken", down=True)
            raise _Retry(self._upstream_error(engine, "the answer broke off")) from exc
        self._first_byte(engine)
        self.info.ttft_s = time.perf_counter() - self.info.start
        if resp.status == 200:
            self._account(self._tail_usage(data))
            if engine.task == "generate":
                self._read_answer(data)
                if self.info.retained is not None:  # audit.retain (service/audit_retain.py)
                    self.info.retained.whole(data, self.path.endswith("chat/completions"))
        else:
            data = normalize_error(resp.status, data)
            content_type = b"application/json"
        self.done = True
        await send(self._start(resp.status, content_type, engine))
        await send({"type": "http.response.body", "body": data})
        self.outcome = self._judge(engine, resp.status)

    async def _relay_stream(
        self, resp: aiohttp.ClientResponse, engine: Engine, send: Send, content_type: bytes
    ) -> None:
        info, metrics = self.info, self.up.metrics
        ttft, itl = metrics.ttft.labels(self.model), metrics.itl.labels(self.model)
        chunks = resp.content.iter_any()
        first: list[bytes] = []
        if self.attempt_ttft is None:
            # A stream starts to the client only with its first bytes: until then it may still
            # be given up and retried on another engine (a canary's: on stable).
            try:
                first.append(await chunks.__anext__())
            except StopAsyncIteration:
                self._engine_error(engine, "stream_incomplete", down=False)
                raise _Retry(self._upstream_error(engine, "the stream was empty")) from None
            except aiohttp.ClientError as exc:
                self._engine_error(engine, "stream_broken", down=True)
                raise _Retry(self._upstream_error(engine, "the stream broke off")) from exc
            self._first_byte(engine)
        await send(self._start(200, content_type, engine, (b"cache-control", b"no-cache")))
        judge = engine.task == "generate" and self.path.endswith("completions")
        pending = b""
        last = 0.0
        # Bytes were sent, so no retry: whatever cuts the stream, the client is told in-band
        # with an error event (the openai client raises APIError on one) before it ends.
        try:
            async for chunk in _chain(first, chunks):
                data = pending + chunk if pending else chunk
                cut = data.rfind(_SSE_END)
                if cut < 0:
                    pending = data
                    continue
                block, pending = data[: cut + 2], data[cut + 2 :]
                now = time.perf_counter()
                engine.last_progress = time.monotonic()  # a busy engine's streams keep it moving
                if last:
                    itl.observe(now - last)
                else:
                    info.ttft_s = now - info.start
                    ttft.observe(info.ttft_s)
                    if self.attempt_ttft is None:
                        self._first_byte(engine)
                last = now
                if judge:
                    self.said = self.said or _OUTPUT.search(block) is not None
                    self.finishes += _FINISH.findall(block)
                if self.resume is not None and not self.done:
                    block = self.resume.observe(block)
                if b'"usage"' in block:
                    block = self._take_usage(block)
                if self.done:
                    continue  # after [DONE]: only reading to the end so the connection is reused
                # The last block and the end of the response go out in one write.
                self.done = block.endswith(_SSE_DONE)
                self.events += block.count(b"data: {")
                if info.retained is not None:  # audit.retain: the text the client is sent
                    info.retained.stream(block)
                await send(
                    {"type": "http.response.body", "body": block, "more_body": not self.done}
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            # (A client disconnect arrives as CancelledError instead, see _watch.)
            if self.done:
                self.outcome = self._judge(engine, 200)
                return  # the client has its whole answer; only the connection's end was lost
            self._engine_error(engine, "stream_broken", down=True)
            if not await self._resumed(engine, send):
                await self._cut(
                    send,
                    "upstream_stream_broken",
                    f"Engine '{engine.name}' failed mid-stream: {type(exc).__name__}." + self._not_resumed(),
                )
            return
        except Exception:
            log.exception("relaying a stream from engine %s failed", engine.name)
            if not self.done:
                await self._cut(
                    send, "gateway_error", "The gateway failed while relaying the stream.", "internal_error"
                )
            return
        if not self.done:
            # A clean end without [DONE] is an answer cut short all the same (an unfinished
            # event in `pending` is dropped: half an event is not one).
            self._engine_error(engine, "stream_incomplete", down=False)
            if not await self._resumed(engine, send):
                await self._cut(
                    send, "upstream_stream_incomplete",
                    f"Engine '{engine.name}' ended the stream early." + self._not_resumed(),
                )
            return
        self.outcome = self._judge(engine, 200)

    async def _resumed(self, engine: Engine, send: Send) -> bool:
        """The broken stream went on from another engine to its end (service/stream_resume.py)."""
        if self.resume is None:
            return False
        up = self.up
        return await take_over(
            self, self.resume, engine, send, session=up.session, router=up.router, metrics=up.metrics,
            timeout=up.timeout, first_byte_timeout_s=up.first_byte_timeout_s, original=self.body,
        )

    def _not_resumed(self) -> str:
        """Why the answer's content kept the stream from going on elsewhere, for its error event."""
        return self.resume.told() if self.resume is not None else ""

    async def _cut(self, send: Send, reason: str, message: str, code: str = "upstream_error") -> None:
        self.info.error = reason
        self.done = True
        event = error_bytes(message, "server_error", code)
        await send({"type": "http.response.body", "body": b"data: " + event + _SSE_END})

    def _take_usage(self, block: bytes) -> bytes:
        """Record usage from the block's events; drop the usage-only event if not asked for."""
        kept = []
        for event in block.split(_SSE_END):
            if event.startswith(b"data: {") and b'"usage"' in event:
                try:
                    obj = json.loads(event[6:])
                except (ValueError, RecursionError):
                    obj = None  # relayed as it came: the client's parser will say what is wrong
                usage = _usage_in(obj)
                if usage:
                    self._account(usage)
                    if self.strip_usage and not obj.get("choices"):
                        continue
            kept.append(event)
        return _SSE_END.join(kept)

    @staticmethod
    def _tail_usage(data: bytes) -> dict[str, Any] | None:
        # OpenAI-style bodies end with "usage"; decoding only from there keeps a large
        # (embeddings) body from being parsed in full.
        at = data.rfind(b'"usage"')
        if at < 0:
            return None
        brace = data.find(b"{", at)
        try:
            usage, _ = json.JSONDecoder().raw_decode(data[brace:].decode())
        except (ValueError, RecursionError):
            return None
        return usage if isinstance(usage, dict) else None

    def _account(self, usage: dict[str, Any] | None) -> None:
        """Token counts from the engine's usage; a count that is not a count is dropped (and
        counted as an engine fault), never carried into the log, metrics or limits."""
        if not usage:
            return
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        self.info.prompt_tokens, self.info.completion_tokens = _count(prompt), _count(completion)
        if (prompt is not None and self.info.prompt_tokens is None) or (
            completion is not None and self.info.completion_tokens is None
        ):
            log.warning("engine %s sent usage that is not token counts", self.info.engine)
            self.up.metrics.upstream_errors.labels(self.info.engine or "-", "bad_usage").inc()

    async def _settle(self) -> None:
        """Give back (or take) the difference between the reservation and the real usage, in
        the rate limits and the quota, and record the usage."""
        info = self.info
        used: int | None
        prompt, completion, cut = info.prompt_tokens, info.completion_tokens, False
        if prompt is not None:
            used = prompt + (completion or 0)
        elif self.status is not None and self.status != 200:
            used = 0  # the engine refused it (a 400 for too many max_tokens): nothing generated
        elif self.events:
            # A stream cut before its usage event (the client went away, the engine broke off):
            # charged and recorded as the prompt's estimate plus one token per event the client
            # was sent (vLLM sends a token or more per event), never just the reservation.
            prompt = self.ticket.prompt_estimate if self.ticket is not None else 0
            completion, cut = self.events, True
            used = prompt + completion
        elif info.ttft_s is None and self.disconnected and self.delivered:
            # The client left before the first byte, but the engine had the request: it read the
            # prompt (and maybe more) until the dropped connection aborted it. Charged the
            # prompt's estimate and recorded as cut.
            prompt = self.ticket.prompt_estimate if self.ticket is not None else 0
            completion, cut = 0, True
            used = prompt
        elif info.ttft_s is None:
            used = 0  # nothing reached the client, nor the engine: charge nothing
        else:
            used = None  # an answer without usage: keep the reservation
        if self.reserved and used is not None and used != self.reserved:
            await self.up.limiter.adjust(self.key, self.reserved - used)
        if self.ticket is not None:
            await self.up.usage.settle(self.key, self.model, self.ticket, prompt, completion, used, cut)
