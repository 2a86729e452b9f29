"""A client that streams chat completions through every gateway, round robin, until stopped,
and counts what it saw: the witness that an upgrade drops no request."""

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Load:
    endpoints: list[str]  # gateway base URLs ending in /v1
    api_key: str
    model: str
    ca_file: Path | None = None
    # Two streams at a time: on a 2-core lab machine the engines must still restart beside them.
    workers: int = 2
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    per_endpoint: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _worker(self, index: int) -> None:
        import httpx
        from openai import OpenAI

        verify: str | bool = str(self.ca_file) if self.ca_file else True
        clients = [
            # No retries: a request the gateway fails must show up here, not be hidden by a retry.
            OpenAI(base_url=url, api_key=self.api_key, max_retries=0,
                   http_client=httpx.Client(verify=verify, timeout=180))
            for url in self.endpoints
        ]
        turn = index
        while not self._stop.is_set():
            turn += 1
            url, client = self.endpoints[turn % len(clients)], clients[turn % len(clients)]
            start = time.monotonic()
            try:
                stream = client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": f"Count to ten ({turn})."}],
                    max_tokens=16, stream=True,
                    # The lab's random-weight model may end a stream at once; that is no failure.
                    extra_body={"ignore_eos": True},
                )
                chunks = [c for c in stream if c.choices and c.choices[0].delta.content]
                if not chunks:
                    raise RuntimeError("a stream without content")
            except Exception as exc:  # every failure is the finding, whatever its type
                with self._lock:
                    self.failed.append(f"{url}: {type(exc).__name__}: {exc}"[:300])
                continue
            with self._lock:
                self.ok += 1
                self.per_endpoint[url] = self.per_endpoint.get(url, 0) + 1
                self.slowest_s = max(self.slowest_s, time.monotonic() - start)

    def __enter__(self) -> "Load":
        for i in range(self.workers):
            t = threading.Thread(target=self._worker, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=200)
