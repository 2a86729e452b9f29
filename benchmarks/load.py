"""A client that sends chat completions through every gateway, round robin, until stopped, and
counts what it saw: the witness that an upgrade drops no request.

Streams and whole (non-streamed) answers run side by side, each in its own threads. A request
counts as a success only when it ended as asked (benchmarks/completions.py): a stream cut
short is a failure whatever it carried before. Leaving the `with` block stops the workers and
fails if one of them is still running after the join deadline.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.completions import check_stream, check_whole

# Exactly this many tokens per answer (ignore_eos): long enough that the streams overlap.
MAX_TOKENS = 32
JOIN_S = 200.0  # longer than one request may take (the client's timeout is 180 s)


def conversation(turn: int) -> list[dict[str, str]]:
    """The conversation a worker sends at `turn`."""
    return [{"role": "user", "content": f"Count to ten ({turn})."}]


@dataclass
class Load:
    endpoints: list[str]  # gateway base URLs ending in /v1
    api_key: str
    model: str
    ca_file: Path | None = None
    workers: int = 8  # streams at a time
    whole_workers: int = 2  # non-streamed requests at a time, beside the streams
    # The key's rpm applies per gateway: the client stays well under it, so that a 429 never
    # stands in for an answer the gateway failed to give.
    max_rps: float = 25.0
    # Headers per request by turn (a gray release's test spreads requests over many keys).
    headers: Callable[[int], dict[str, str]] | None = None
    # Greedy decoding (0) makes an answer comparable with the same prompt asked again; None
    # leaves the model's default sampling.
    temperature: float | None = None
    ok: int = 0
    ok_streams: int = 0
    ok_whole: int = 0
    failed: list[str] = field(default_factory=list)
    per_endpoint: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0
    peak_streams: int = 0  # streams in flight at once, at most
    unfinished: list[str] = field(default_factory=list)  # workers still running after the join
    # Every stream that succeeded: (turn, started, ended, text), times on the monotonic clock.
    streams: list[tuple[int, float, float, str]] = field(default_factory=list)
    _streaming: int = 0
    _next_slot: float = 0.0
    _started: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _pace(self) -> None:
        with self._lock:
            slot = max(time.monotonic(), self._next_slot)
            self._next_slot = slot + 1 / self.max_rps
        time.sleep(max(0.0, slot - time.monotonic()))

    def _ask(self, client, turn: int, stream: bool) -> None:  # type: ignore[no-untyped-def]
        messages = conversation(turn)
        # The lab's random-weight model may pick EOS at once: ignore_eos makes the length exact.
        extra: dict[str, object] = {"ignore_eos": True}
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        if not stream:
            check_whole(client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=MAX_TOKENS, extra_body=extra,
                extra_headers=self.headers(turn) if self.headers else None,
            ), MAX_TOKENS)
            return
        with self._lock:
            self._streaming += 1
            self.peak_streams = max(self.peak_streams, self._streaming)
        started = time.monotonic()
        try:
            text = check_stream(client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=MAX_TOKENS, extra_body=extra,
                stream=True, stream_options={"include_usage": True},
                extra_headers=self.headers(turn) if self.headers else None,
            ), MAX_TOKENS)
            with self._lock:
                self.streams.append((turn, started, time.monotonic(), text))
        finally:
            with self._lock:
                self._streaming -= 1

    def _worker(self, index: int, stream: bool) -> None:
        import httpx
        from openai import OpenAI

        verify: str | bool = str(self.ca_file) if self.ca_file else True
        # A connection per request. An idle keep-alive connection that a gateway closes (its idle
        # timeout, or a restart) races with the next request sent on it, a failure HTTP/1.1
        # leaves to the client's retry; a new connection is what the restart promise is about:
        # queued by the systemd socket, never refused.
        fresh = httpx.Limits(max_keepalive_connections=0)
        clients = [
            # No retries: a request the gateway fails must show up here, not be hidden by a retry.
            OpenAI(base_url=url, api_key=self.api_key, max_retries=0,  # its stubs name httpx2's Client
                   http_client=httpx.Client(verify=verify, timeout=180, limits=fresh))  # type: ignore[arg-type]
            for url in self.endpoints
        ]
        turn = index
        while not self._stop.is_set():
            turn += 1
            url, client = self.endpoints[turn % len(clients)], clients[turn % len(clients)]
            self._pace()
            start = time.monotonic()
            try:
                self._ask(client, turn, stream)
            except Exception as exc:  # every failure is the finding, whatever its type
                cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
                with self._lock:
                    self.failed.append(
                        f"{url}: {'stream' if stream else 'whole'} at +{start - self._started:.0f} s: "
                        f"{type(exc).__name__}: {exc}{cause}"[:400]
                    )
                continue
            with self._lock:
                self.ok += 1
                self.ok_streams += stream
                self.ok_whole += not stream
                self.per_endpoint[url] = self.per_endpoint.get(url, 0) + 1
                self.slowest_s = max(self.slowest_s, time.monotonic() - start)

    @property
    def streaming(self) -> int:
        """Streams in flight now (a benchmark reads it at the moment it breaks something)."""
        with self._lock:
            return self._streaming

    def __enter__(self) -> "Load":
        self._started = time.monotonic()
        kinds = [True] * self.workers + [False] * self.whole_workers
        for i, stream in enumerate(kinds):
            t = threading.Thread(target=self._worker, args=(i, stream), name=f"load-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        self._stop.set()
        deadline = time.monotonic() + JOIN_S
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self.unfinished = [t.name for t in self._threads if t.is_alive()]
        if exc_type is None:  # never in place of the exception that ended the block
            assert not self.unfinished, f"load workers still running after {JOIN_S:.0f} s: {self.unfinished}"
