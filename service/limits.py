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
    async def reserve(self, key: ApiKey, tokens: int, requests: int = 1) -> float:
        """Reserve `requests` (1, or 0 for tokens alone) and `tokens`; 0.0 if admitted, else
        seconds until it would be."""

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


def take(bucket: Bucket, key: ApiKey, tokens: int, requests: int = 1) -> float:
    """Take `requests` (1 or 0) and `tokens` if both are there (0.0), else the seconds until
    they are."""
    wait = 0.0
    if requests and key.rpm and bucket.requests < 1:
        wait = (1 - bucket.requests) * 60 / key.rpm
    if key.tpm and bucket.tokens < tokens:
        wait = max(wait, (tokens - bucket.tokens) * 60 / key.tpm)
    if wait == 0.0:
        bucket.requests -= requests
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
        bucket = self._buckets.get(key.limit_name)
        if bucket is None:
            bucket = self._buckets[key.limit_name] = Bucket(key.rpm or 0, key.tpm or 0, now)
        refill(bucket, key, now)
        return bucket

    async def reserve(self, key: ApiKey, tokens: int, requests: int = 1) -> float:
        return take(self._refilled(key), key, tokens, requests)

    async def adjust(self, key: ApiKey, tokens: int) -> None:
        if key.tpm:
            give_back(self._refilled(key), key, tokens)

    async def close(self) -> None:
        return None


async def reserve_or_raise(limiter: Limiter, key: ApiKey, tokens: int, requests: int = 1) -> int:
    """Reserve `requests` (1: a request; 0: its tokens, the request being charged already) and
    `tokens`, or raise 429; returns the tokens reserved.

    A request larger than the key's whole tpm reserves the full bucket instead of being
    refused forever; reconciliation then charges what it really used.
    """
    if not (requests and key.rpm) and not (tokens and key.tpm):
        return 0
    tokens = min(tokens, key.tpm) if key.tpm else 0
    wait = await limiter.reserve(key, tokens, requests)
    if wait > 0:
        raise GatewayError(
            429,
            f"Rate limit reached for {key.limit_owner} (rpm={key.rpm}, tpm={key.tpm}); "
            f"retry in {wait:.1f} s.",
            "rate_limit_error",
            "rate_limit_exceeded",
            {"Retry-After": str(max(1, math.ceil(wait)))},
        )
    return tokens


def estimate_tokens(value: Any) -> int:
    """Tokens in a prompt, estimated without a tokenizer: one per 3 characters of ASCII text
    (most tokenizers average 3-4, so this errs high), one more per non-ASCII character (CJK
    text is about one token a character: its 2 extra UTF-8 bytes count one), exact for token
    ids, 64 per non-text part. It sizes the reservation; the engine's usage settles it."""
    if isinstance(value, str):
        extra = len(value.encode("utf-8", "surrogatepass")) - len(value)
        return len(value) // 3 + (extra + 1) // 2 + 1
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
    """Gateway-wide state that admits or refuses requests before any work is done: requests in
    flight (all, and each key's) and the bytes of their bodies, held until they end."""

    def __init__(self, max_in_flight: int, max_per_key: int | None = None,
                 max_body_bytes_in_flight: int | None = None, max_body_bytes: int = 0) -> None:
        self.max_in_flight = max_in_flight
        self.max_per_key = max_per_key or max_in_flight
        self.max_body_bytes_in_flight = max_body_bytes_in_flight or (1 << 62)
        # One key may hold a quarter of the bodies' budget (or one largest body): its slow
        # senders cannot take all of it.
        self.max_body_bytes_per_key = max(self.max_body_bytes_in_flight // 4, max_body_bytes)
        self.in_flight = 0
        self.by_key: dict[str, int] = {}
        self.body_bytes = 0
        self.key_bytes: dict[str, int] = {}
        self.draining = False

    def take_bytes(self, key: str, more: int) -> bool:
        """Hold `more` bytes of bodies for `key`, if the budget and its share allow."""
        had = self.key_bytes.get(key, 0)
        if self.body_bytes + more > self.max_body_bytes_in_flight or had + more > self.max_body_bytes_per_key:
            return False
        self.body_bytes += more
        self.key_bytes[key] = had + more
        return True

    def give_bytes(self, key: str, held: int) -> None:
        if not held:
            return
        self.body_bytes -= held
        left = self.key_bytes[key] - held
        if left:
            self.key_bytes[key] = left
        else:
            del self.key_bytes[key]


@dataclass(frozen=True, slots=True)
class BodyPolicy:
    """How long a body may take: all of it within `timeout_s`, and, after `rate_grace_s`, at
    least `min_rate` bytes a second on average (a trickle that would take the whole timeout
    holds its slot, and its key's, for that long)."""

    max_bytes: int
    timeout_s: float
    min_rate: float = 0.0
    rate_grace_s: float = 5.0


def _overloaded(message: str) -> GatewayError:
    return GatewayError(503, message, "server_error", "overloaded", {"Retry-After": "1"})


class AdmissionMiddleware:
    """For /v1/*, before any byte of the body is read: 503 while draining or saturated, 401
    without a valid key, 429 when the key has its share of requests in flight or (POST) its
    requests per minute are spent: a key's slow bodies can hold only its own slots, and a key
    out of requests is refused before its body costs anything. Then the body, under a size
    limit (413, on Content-Length first, then while reading), a deadline and a minimum rate
    (408), and the gateway's budget of body bytes in flight (503). A request counts as in
    flight (the cap, and what the drain waits on) from the moment its body is being read, so
    slow senders are bounded by the cap too. An answer given before the body was read closes
    the connection: the unread rest is never read, and the connection cannot be held open by
    sending it."""

    def __init__(
        self,
        app: ASGIApp,
        admission: Admission,
        keys: KeyRing,
        body: BodyPolicy,
        metrics: "Metrics",
        limiter: Limiter | None = None,
    ) -> None:
        self.app = app
        self.admission = admission
        self.keys = keys
        self.body = body
        self.metrics = metrics
        self.limiter = limiter or LocalLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        info: RequestInfo = scope["state"]["info"]
        adm = self.admission
        try:
            self._open()
        except GatewayError as exc:
            await self._refuse(scope, send, info, exc)
            return
        # The gateway's slot is taken before the caller is identified, which may await (a JWKS
        # fetch for an unknown kid): requests arriving together cannot all pass the cap's check.
        adm.in_flight += 1
        self.metrics.in_flight.set(adm.in_flight)
        try:
            await self._serve(scope, receive, send, info)
        finally:
            adm.in_flight -= 1
            self.metrics.in_flight.set(adm.in_flight)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, info: RequestInfo) -> None:
        try:
            key = await self._admit(scope, info)
        except GatewayError as exc:
            await self._refuse(scope, send, info, exc)
            return
        scope["state"]["key"] = key  # for the routes: the key is checked once
        adm = self.admission
        # The key's slot is taken before anything else is awaited, for the same reason.
        adm.by_key[key.name] = adm.by_key.get(key.name, 0) + 1
        held = 0  # body bytes this request holds in the gateway's budget
        try:
            if scope["method"] == "POST" and key.rpm:
                try:
                    await reserve_or_raise(self.limiter, key, 0)
                except GatewayError as exc:
                    await self._refuse(scope, send, info, exc)
                    return
            if scope["method"] == "POST":
                try:
                    body, held = await self._read_body(scope, receive, key.name)
                except TimeoutError:
                    late = GatewayError(408, self._late_message(), code="request_timeout")
                    await self._refuse(scope, send, info, late)
                    return
                except _Refused as refused:
                    held = refused.held
                    await self._refuse(scope, send, info, refused.error)
                    return
                if body is None:  # the client left; nobody to answer (logged as 499)
                    info.error = "client_disconnected"
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send)
        finally:
            adm.give_bytes(key.name, held)
            left = adm.by_key[key.name] - 1
            if left:
                adm.by_key[key.name] = left
            else:
                del adm.by_key[key.name]

    def _late_message(self) -> str:
        rate = f", or slower than {self.body.min_rate:g} bytes/s" if self.body.min_rate else ""
        return f"The request body did not arrive within {self.body.timeout_s:g} s{rate}."

    def _open(self) -> None:
        adm = self.admission
        if adm.draining:
            raise GatewayError(
                503, "The gateway is shutting down.", "server_error", "shutting_down",
                {"Retry-After": "1"},
            )
        if adm.in_flight >= adm.max_in_flight:
            raise _overloaded("The gateway is at capacity.")

    async def _admit(self, scope: Scope, info: RequestInfo) -> ApiKey:
        adm = self.admission
        key = await self.keys.identify(header(scope, b"authorization"))
        info.key_name, info.tenant = key.name, key.tenant  # its refusals below are counted against it
        if adm.by_key.get(key.name, 0) >= adm.max_per_key:
            raise GatewayError(
                429,
                f"Key '{key.name}' has {adm.max_per_key} requests in flight on this gateway, its most; "
                "retry when one ends.",
                "rate_limit_error",
                "too_many_in_flight",
                {"Retry-After": "1"},
            )
        return key

    async def _refuse(self, scope: Scope, send: Send, info: RequestInfo, exc: GatewayError) -> None:
        info.error = exc.code
        if exc.code == "shutting_down" or _may_have_body(scope):
            exc.headers = {**(exc.headers or {}), "Connection": "close"}
        await send_error(send, exc)

    def _hold(self, key: str, held: int, more: int) -> int:
        """Take `more` bytes of the gateway's body budget (held: what this request has)."""
        if not self.admission.take_bytes(key, more):
            raise _Refused(_overloaded("The gateway holds its most request bodies; retry shortly."), held)
        return held + more

    async def _read_body(self, scope: Scope, receive: Receive, key: str) -> tuple[bytes | None, int]:
        """The whole body (None if the client left) and the budget bytes it holds; 413 above
        the limit, 503 past the budget, TimeoutError past the deadline or below the rate."""
        policy = self.body
        too_large = GatewayError(
            413, f"Request body is larger than {policy.max_bytes} bytes.", code="request_too_large"
        )
        length = header(scope, b"content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        if declared is not None and declared > policy.max_bytes:
            raise _Refused(too_large, 0)
        # What Content-Length announces is held up front: the budget refuses before the bytes come.
        held = self._hold(key, 0, declared) if declared else 0
        parts: list[bytes] = []
        size = 0
        start = time.monotonic()
        try:
            while True:
                message = await asyncio.wait_for(receive(), self._wait_for_next(start, size))
                if message["type"] != "http.request":
                    return None, held
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > policy.max_bytes:
                    raise _Refused(too_large, held)
                if size > held:
                    held = self._hold(key, held, size - held)
                parts.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(parts), held
        except _Refused as refused:
            refused.held = max(refused.held, held)
            raise
        except BaseException:
            self.admission.give_bytes(key, held)
            raise

    def _wait_for_next(self, start: float, size: int) -> float:
        """Seconds the next chunk may take: to the deadline, or sooner to the moment the bytes
        so far fall below the minimum rate."""
        policy = self.body
        elapsed = time.monotonic() - start
        limit = policy.timeout_s
        if policy.min_rate:
            limit = min(limit, policy.rate_grace_s + size / policy.min_rate)
        return max(0.0, limit - elapsed)


class _Refused(Exception):
    """A body refused after `held` bytes of the budget were taken (the caller gives them back)."""

    def __init__(self, error: GatewayError, held: int) -> None:
        self.error, self.held = error, held


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
