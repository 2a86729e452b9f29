"""Per-request accounting: the request id, the JSON-lines access log and request metrics.

Prompts are never logged unless `log_prompts` (a debug setting) is on.
"""

import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics

CLIENT_CLOSED = 499  # nginx's status for a client that closed the connection before the answer


@dataclass(slots=True)
class RequestInfo:
    """What the handlers learn about a request, for the log line and the metrics."""

    request_id: str
    start: float
    key_name: str = "-"
    model: str = "-"
    stream: bool = False
    engine: str | None = None
    attempts: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    error: str | None = None
    # A stream that broke off after its first byte: resumed, failed, or why it was not
    # (service/stream_resume.py); None for every other request.
    resume: str | None = None
    prompt: Any = None  # only set when log_prompts is on
    tenant: str | None = None
    stage: str | None = None  # the release stage of the engine that answered
    # The prompt and answer the audit trail keeps (service/audit_retain.py); None unless
    # audit.retain is on: then nothing of the answer is gathered.
    retained: Any = None

    @property
    def metric_key(self) -> str:
        """The metrics' key label: an API key's name (an operator makes those, a few), but for a
        token's caller (jwt/<subject>: '/' is in no key name) its tenant: an IdP's subjects are
        unbounded, and every label value is a series Prometheus keeps."""
        if "/" not in self.key_name:
            return self.key_name
        return f"tenant/{self.tenant}" if self.tenant else "jwt"


class AccessLog:
    """Lines are batched and written at most every 0.2 s, in one write, on the event loop: a
    writer thread contending for the GIL took a third of the gateway's CPU (measured)."""

    FLUSH_AFTER_S = 0.2
    MAX_PENDING = 512

    def __init__(self, path: Path | None) -> None:
        # One os.write per batch on an O_APPEND descriptor: the workers of one gateway share the
        # file, and a batch written by one syscall is never interleaved with another's.
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640) if path else None
        self._pending: list[dict[str, Any]] = []
        self._timer: asyncio.TimerHandle | None = None

    def emit(self, record: dict[str, Any]) -> None:
        self._pending.append(record)
        if len(self._pending) >= self.MAX_PENDING:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.FLUSH_AFTER_S, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending:
            batch, self._pending = self._pending, []
            self._write(batch)

    def _write(self, batch: list[dict[str, Any]]) -> None:
        data = "\n".join(json.dumps(r, separators=(",", ":"), default=str) for r in batch) + "\n"
        if self._fd is None:
            sys.stdout.write(data)
            sys.stdout.flush()
        else:
            write_all(self._fd, data.encode())

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a short write only on a full disk or a signal; finish the batch
        view = view[os.write(fd, view) :]


class AccessLogMiddleware:
    """Outermost layer for /v1/*: gives each request an id and an info record, and logs and
    counts it when the response has ended (for a stream, when the last chunk is sent)."""

    def __init__(self, app: ASGIApp, log: AccessLog, metrics: Metrics, audit: AccessLog | None = None) -> None:
        self.app = app
        self.log = log
        self.metrics = metrics
        self.audit = audit  # the per-request audit trail (service/request_audit.py), if kept
        self.pid = os.getpid()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        info = RequestInfo(request_id=uuid.uuid4().hex, start=time.perf_counter())
        scope.setdefault("state", {})["info"] = info
        status: int | None = None
        rid_header = (b"x-request-id", info.request_id.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), rid_header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if status is None:
                # No answer started: a client that left is nginx's 499, not a gateway failure
                # (uvicorn answers 500 to the others).
                status = CLIENT_CLOSED if info.error == "client_disconnected" else 500
            self._record(scope, info, status)

    def _record(self, scope: Scope, info: RequestInfo, status: int) -> None:
        elapsed = time.perf_counter() - info.start
        record: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "request_id": info.request_id,
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "key": info.key_name,
            "tenant": info.tenant,
            "model": info.model,
            "stream": info.stream,
            "engine": info.engine,
            "attempts": info.attempts,
            "prompt_tokens": info.prompt_tokens,
            "completion_tokens": info.completion_tokens,
            "ttft_ms": round(info.ttft_s * 1000, 2) if info.ttft_s is not None else None,
            "duration_ms": round(elapsed * 1000, 2),
            "error": info.error,
            "resume": info.resume,
            "pid": self.pid,  # which worker, when the gateway runs several
        }
        if info.prompt is not None:
            record["prompt"] = info.prompt
        self.log.emit(record)
        if self.audit is not None:
            client = scope.get("client")
            # never the prompt or the answer, unless audit.retain keeps them, redacted (docs/audit.md)
            audited = {
                "ts": record["ts"], "request_id": info.request_id, "subject": info.key_name, "tenant": info.tenant,
                "path": scope["path"], "model": info.model, "stage": info.stage, "status": status,
                "prompt_tokens": info.prompt_tokens, "completion_tokens": info.completion_tokens,
                "latency_ms": record["duration_ms"], "client": client[0] if client else None,
            }
            if info.retained is not None:
                audited.update(info.retained.fields())
            self.audit.emit(audited)
        m = self.metrics
        m.requests.labels(info.model, info.metric_key, str(status)).inc()
        if status < 400:
            m.request_seconds.labels(info.model).observe(elapsed)
        if info.prompt_tokens:
            m.prompt_tokens.labels(info.model, info.metric_key).inc(info.prompt_tokens)
        if info.completion_tokens:
            m.completion_tokens.labels(info.model, info.metric_key).inc(info.completion_tokens)
