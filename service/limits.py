"""Per-key rate limits (requests and tokens per minute) and the gateway's admission control.

Limits are token buckets refilled continuously. A request reserves one request and
prompt + max_tokens tokens up front; when it ends, the difference with the real usage is
given back (or taken). With `redis_url` the buckets live in Redis instead (redis_limits.py),
so every gateway of a deployment shares them.
"""

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.accesslog import RequestInfo
from service.auth import ApiKey, KeyRing
from service.errors import GatewayError, send_error
from service.schemas import ChatMessage

if TYPE_CHECKING:
    from service.metrics import Metrics


class Limiter(Protocol):
    async def reserve(self, key: ApiKey, tokens: int) -> float:
        """Reserve a request and `tokens`; 0.0 if admitted, else seconds until it would be."""

    async def adjust(self, key: ApiKey, tokens: int) -> None:
        """Give back `tokens` (negative: take more) once the real usage is known."""

    async def close(self) -> None: ...


@dataclass(slots=True)
class Bucket:
    requests: float
    tokens: float
    stamp: float


# The bucket arithmetic, shared by LocalLimiter and the workers' SharedLimiter (service/shared.py);
# RedisLimiter runs the same in Lua.
def refill(bucket: Bucket, key: ApiKey, now: float) -> None:
    elapsed, bucket.stamp = now - bucket.stamp, now
    if key.rpm:
        bucket.requests = min(key.rpm, bucket.requests + elapsed * key.rpm / 60)
    if key.tpm:
        bucket.tokens = min(key.tpm, bucket.tokens + elapsed * key.tpm / 60)


def take(bucket: Bucket, key: ApiKey, tokens: int) -> float:
    """Take a request and `tokens` if both are there (0.0), else the seconds until they are."""
    wait = 0.0
    if key.rpm and bucket.requests < 1:
        wait = (1 - bucket.requests) * 60 / key.rpm
    if key.tpm and bucket.tokens < tokens:
        wait = max(wait, (tokens - bucket.tokens) * 60 / key.tpm)
    if wait == 0.0:
        bucket.requests -= 1
        bucket.tokens -= tokens
    return wait


def give_back(bucket: Bucket, key: ApiKey, tokens: int) -> None:
    if key.tpm:
        bucket.tokens = min(key.tpm, bucket.tokens + tokens)


class LocalLimiter:
    """Buckets in this process: right for a deployment with one single-worker gateway."""

    def __init__(self) -> None:
        self._buckets: dict[str, Bucket] = {}

    def _refilled(self, key: ApiKey) -> Bucket:
        now = time.monotonic()
        bucket = self._buckets.get(key.name)
        if bucket is None:
            bucket = self._buckets[key.name] = Bucket(key.rpm or 0, key.tpm or 0, now)
        refill(bucket, key, now)
        return bucket

    async def reserve(self, key: ApiKey, tokens: int) -> float:
        return take(self._refilled(key), key, tokens)

    async def adjust(self, key: ApiKey, tokens: int) -> None:
        if key.tpm:
            give_back(self._refilled(key), key, tokens)

    async def close(self) -> None:
        return None


async def reserve_or_raise(limiter: Limiter, key: ApiKey, tokens: int) -> int:
    """Reserve for one request or raise 429; returns the tokens reserved.

    A request larger than the key's whole tpm reserves the full bucket instead of being
    refused forever; reconciliation then charges what it really used.
    """
    if not key.rpm and not key.tpm:
        return 0
    tokens = min(tokens, key.tpm) if key.tpm else 0
    wait = await limiter.reserve(key, tokens)
    if wait > 0:
        raise GatewayError(
            429,
            f"Rate limit reached for key '{key.name}' (rpm={key.rpm}, tpm={key.tpm}); "
            f"retry in {wait:.1f} s.",
            "rate_limit_error",
            "rate_limit_exceeded",
            {"Retry-After": str(max(1, math.ceil(wait)))},
        )
    return tokens


def estimate_tokens(value: Any) -> int:
    """Tokens in a prompt, estimated without a tokenizer: one per 3 characters of text (most
    tokenizers average 3-4, so this errs high), exact for token ids, 64 per non-text part. It
    only sizes the reservation; the engine's usage settles it."""
    if isinstance(value, str):
        return len(value) // 3 + 1
    if isinstance(value, int):
        return 1
    if isinstance(value, list):
        return sum(estimate_tokens(v) for v in value)
    if isinstance(value, dict):
        return estimate_tokens(value.get("text", "")) if value.get("type") == "text" else 64
    return 0


def estimate_pair_tokens(queries: Sequence[Any], documents: Sequence[Any]) -> int:
    """Tokens a score/rerank request feeds the engine: every pair holds its query and its
    document, so one query against N documents counts the query N times (pairs are 1:N,
    N:1 or N:N as vLLM forms them). A multi-modal input ({"content": [N parts]}) is N inputs,
    one per part, as vLLM reads it; parts count like chat parts."""

    def inputs(side: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for value in side:
            # a multi-modal input (schemas.MultiModalInput)
            out.extend(value.content if hasattr(value, "content") else [value])
        return out

    qs, ds = inputs(queries), inputs(documents)
    pairs = max(len(qs), len(ds))
    q = sum(estimate_tokens(v) for v in qs) * (pairs if len(qs) == 1 else 1)
    d = sum(estimate_tokens(v) for v in ds) * (pairs if len(ds) == 1 else 1)
    return q + d


def estimate_chat_tokens(messages: list[ChatMessage]) -> int:
    # a few tokens of chat template per message
    return sum(estimate_tokens(m.content) + 4 for m in messages)


class Admission:
    """Gateway-wide state that admits or refuses requests before any work is done."""

    def __init__(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.draining = False


class AdmissionMiddleware:
    """For /v1/*, before any byte of the body is read: 503 while draining or saturated, 401
    without a valid key. Then the body, under a size limit (413, on Content-Length first, then
    while reading) and a deadline (408). A request counts as in flight (the cap, and what the
    drain waits on) from the moment its body is being read, so slow senders are bounded by the
    cap too. An answer given before the body was read closes the connection: the unread rest is
    never read, and the connection cannot be held open by sending it."""

    def __init__(
        self,
        app: ASGIApp,
        admission: Admission,
        keys: KeyRing,
        max_body_bytes: int,
        body_timeout_s: float,
        metrics: "Metrics",
    ) -> None:
        self.app = app
        self.admission = admission
        self.keys = keys
        self.max_body = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        info: RequestInfo = scope["state"]["info"]
        try:
            key = self._admit(scope)
        except GatewayError as exc:
            await self._refuse(scope, send, info, exc)
            return
        info.key_name = key.name
        scope["state"]["key"] = key  # for the routes: the key is checked once
        adm = self.admission
        adm.in_flight += 1
        self.metrics.in_flight.set(adm.in_flight)
        try:
            if scope["method"] == "POST":
                try:
                    async with asyncio.timeout(self.body_timeout_s):
                        body = await self._read_body(scope, receive)
                except TimeoutError:
                    late = GatewayError(
                        408,
                        f"The request body did not arrive within {self.body_timeout_s:g} s.",
                        code="request_timeout",
                    )
                    await self._refuse(scope, send, info, late)
                    return
                except GatewayError as exc:
                    await self._refuse(scope, send, info, exc)
                    return
                if body is None:  # the client left; nobody to answer (logged as 499)
                    info.error = "client_disconnected"
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send)
        finally:
            adm.in_flight -= 1
            self.metrics.in_flight.set(adm.in_flight)

    def _admit(self, scope: Scope) -> ApiKey:
        adm = self.admission
        if adm.draining:
            raise GatewayError(
                503, "The gateway is shutting down.", "server_error", "shutting_down",
                {"Retry-After": "1"},
            )
        if adm.in_flight >= adm.max_in_flight:
            raise GatewayError(
                503, "The gateway is at capacity.", "server_error", "overloaded", {"Retry-After": "1"}
            )
        return self.keys.authenticate(header(scope, b"authorization"))

    async def _refuse(self, scope: Scope, send: Send, info: RequestInfo, exc: GatewayError) -> None:
        info.error = exc.code
        if exc.code == "shutting_down" or _may_have_body(scope):
            exc.headers = {**(exc.headers or {}), "Connection": "close"}
        await send_error(send, exc)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body; None if the client left; 413 above the limit."""
        too_large = GatewayError(
            413, f"Request body is larger than {self.max_body} bytes.", code="request_too_large"
        )
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            raise too_large
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise too_large
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _may_have_body(scope: Scope) -> bool:
    length = header(scope, b"content-length")
    return header(scope, b"transfer-encoding") is not None or (length is not None and length != "0")


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, as one message; then the real channel (for disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
