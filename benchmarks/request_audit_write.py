"""What writing the request audit trail costs the event loop, beside the access log's write of the
same batches (service/request_audit.py, service/accesslog.py): microseconds per batch and per
record, and a batch after another worker wrote (the chain's head read back from the file).

    .venv/bin/python -m benchmarks.request_audit_write
"""

import tempfile
import time
from pathlib import Path
from typing import Any

from service.accesslog import AccessLog
from service.request_audit import RequestAudit

RECORD: dict[str, Any] = {
    "ts": "2026-12-06T02:41:07.311+00:00",
    "request_id": "9f" * 16,
    "subject": "jwt/alice.3c0d11112222",
    "tenant": "research",
    "path": "/v1/chat/completions",
    "model": "qwen-72b",
    "stage": "stable",
    "status": 200,
    "prompt_tokens": 812,
    "completion_tokens": 256,
    "latency_ms": 1834.2,
    "client": "10.0.4.17",
}


def per_batch(log: AccessLog, size: int, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        log._write([RECORD] * size)
    return (time.perf_counter() - start) / rounds


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    audit, access = RequestAudit(folder / "audit", 30), AccessLog(folder / "access.jsonl")
    for name, log in (("request audit", audit), ("access log", access)):
        for size in (1, 32, 512):
            seconds = per_batch(log, size, 200 if size < 512 else 40)
            print(f"{name}, batch of {size}: {seconds * 1e6:.0f} us a batch, {seconds / size * 1e6:.1f} us a record")
    other = RequestAudit(folder / "audit", 30)  # a second worker: each batch reads the other's head
    start = time.perf_counter()
    for _ in range(100):
        audit._write([RECORD])
        other._write([RECORD])
    print(f"two workers alternating, batch of 1: {(time.perf_counter() - start) / 200 * 1e6:.0f} us a batch")


if __name__ == "__main__":
    main()
