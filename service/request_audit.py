"""The per-request audit trail a gateway host keeps (#38 item 3, docs/audit.md).

One record per /v1/ request: when, who (API key name or token caller), tenant, model, release
stage, status, prompt and completion tokens, latency and the client's address; never the prompt
or the answer. Records are written as the access log's lines are (AccessLog: batched, at most
every 0.2 s, one write on the event loop), into `<dir>/requests-<UTC day>.jsonl` (0600, a file a
day), chained by service/audit_chain.py.

The workers of a gateway share one chain: each batch is written under an flock on `<dir>/.lock`
(released by the kernel if a worker dies), after reading the chain's head, the newest record,
unless this worker wrote it itself. A batch takes the lock for one write and at most one small
read, as service/shared.py's buckets do. A day's file older than `retention_days` is removed
when the next day's file is started.

The daily cap (`max_bytes_per_day`): once today's file has reached it, the gateway's refusals
(4xx, not 499: a client that left may have cost the engines) are no longer written one by one
but counted, and every minute (and at the day's turn and at close) one chained
`refusals_not_recorded` record says how many, of which statuses, between which times. Answered
requests are still written: a refusal costs a flood nothing, an answer costs the engines, so
answers are bounded by the deployment's capacity. Nothing is removed from the chain, so it
verifies as before; the count also goes to the metric the alert PLIGatewayRequestAuditCapped
reads.
"""

import fcntl
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from service.accesslog import CLIENT_CLOSED, AccessLog, write_all
from service.audit_chain import FILE_PREFIX, FILE_SUFFIX, GENESIS, NOT_RECORDED, digest, seal

log = logging.getLogger("service.request_audit")

LOCK_NAME = ".lock"
_SMALL_TAIL = 4096
_TAIL_BYTES = 64 * 1024  # far more than one record
SUMMARY_EVERY_S = 60.0


def day_file(folder: Path, day: str) -> Path:
    return folder / f"{FILE_PREFIX}{day}{FILE_SUFFIX}"


def _day_of(path: Path) -> date | None:
    try:
        return date.fromisoformat(path.name[len(FILE_PREFIX) : -len(FILE_SUFFIX)])
    except ValueError:
        return None


class RequestAudit(AccessLog):
    def __init__(
        self,
        folder: Path,
        retention_days: int,
        max_bytes_per_day: int = 0,
        on_unrecorded: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(None)
        self.folder = folder
        self.retention_days = retention_days
        self.max_bytes_per_day = max_bytes_per_day  # 0: no cap
        self._on_unrecorded = on_unrecorded  # the metric's counter, told each refusal held back
        # Refusals held back since the last count record: by status, and the first and last ts.
        self._held: Counter[str] = Counter()
        self._held_span: list[str] = []
        self._last_summary = time.monotonic()
        self._closing = False
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # on hosts: the unit's StateDirectory
        self._lock = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._day: str | None = None
        self._file: int | None = None
        # The file's (inode, size) after this worker's last write, and the head it left: while
        # both still hold, no other worker has written since and the head needs no reading.
        self._left: tuple[int, int] | None = None
        self._head: tuple[int, str] = (0, GENESIS)

    def _write(self, batch: list[dict[str, Any]]) -> None:
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            try:
                self._append(batch)
            finally:
                fcntl.flock(self._lock, fcntl.LOCK_UN)
        except OSError as exc:  # a full disk: the requests go on, the operator is told
            log.error("request audit: %d records not written: %s", len(batch), exc)

    def _append(self, batch: list[dict[str, Any]]) -> None:
        day = datetime.now(UTC).date().isoformat()
        turned = self._day is not None and day != self._day
        if day != self._day or self._file is None:
            self._start(day)
        assert self._file is not None
        st = os.fstat(self._file)
        if self.max_bytes_per_day and st.st_size >= self.max_bytes_per_day:
            batch = self._hold_refusals(batch)
        if self._held and (turned or self._closing or time.monotonic() - self._last_summary >= SUMMARY_EVERY_S):
            # at the day's turn before the new day's records: the count is of the day before
            batch = [self._summary(), *batch] if turned else [*batch, self._summary()]
        if not batch:
            return
        torn = False
        if self._left != (st.st_ino, st.st_size):
            self._head, torn = self._read_head(st.st_size)
        seq, prev = self._head
        lines = []
        for record in batch:
            seq += 1
            line = seal(record, seq, prev)
            prev = digest(line)
            lines.append(line)
        # After a line cut short (a crash mid-write), the next record starts on a line of its own.
        data = (b"\n" if torn else b"") + b"\n".join(lines) + b"\n"
        write_all(self._file, data)
        self._head, self._left = (seq, prev), (st.st_ino, st.st_size + len(data))

    def _hold_refusals(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The batch without its refusals, which are counted instead (today's file is full)."""
        kept = []
        for record in batch:
            status = record.get("status")
            if isinstance(status, int) and 400 <= status < CLIENT_CLOSED:
                self._held[str(status)] += 1
                ts = str(record.get("ts", ""))
                self._held_span = [self._held_span[0] if self._held_span else ts, ts]
            else:
                kept.append(record)
        held = len(batch) - len(kept)
        if held and self._on_unrecorded is not None:
            self._on_unrecorded(held)
        return kept

    def _summary(self) -> dict[str, Any]:
        """The chained record of the refusals held back since the last one; resets the count."""
        record = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "event": NOT_RECORDED,
            "count": sum(self._held.values()),
            "statuses": dict(sorted(self._held.items())),
            "first_ts": self._held_span[0],
            "last_ts": self._held_span[1],
            "max_bytes_per_day": self.max_bytes_per_day,
            "pid": os.getpid(),
        }
        log.warning(
            "request audit: today's file reached its cap of %d bytes; %d refused requests counted, "
            "not recorded one by one", self.max_bytes_per_day, record["count"],
        )
        self._held.clear()
        self._held_span = []
        self._last_summary = time.monotonic()
        return record

    def _start(self, day: str) -> None:
        if self._file is not None:
            os.close(self._file)
        self._file = os.open(day_file(self.folder, day), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._day, self._left = day, None
        if self.retention_days:
            oldest = date.fromisoformat(day) - timedelta(days=self.retention_days)
            for path in self.folder.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"):
                when = _day_of(path)
                if when is not None and when < oldest:
                    path.unlink(missing_ok=True)
                    log.info("request audit: removed %s (older than %d days)", path.name, self.retention_days)

    def _read_head(self, today_size: int) -> tuple[tuple[int, str], bool]:
        """The newest record's (seq, hash), and whether today's file ends inside a line;
        (0, GENESIS) when there is none. Today's file when it has records (the usual case: one
        small read), else the newest earlier day's."""
        assert self._day is not None
        today = day_file(self.folder, self._day)
        files = (
            [today]
            if today_size
            else sorted((p for p in self.folder.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}") if p != today), reverse=True)
        )
        for path in files:
            head = _tail_head(path)
            if head is not None:
                return head[0], head[1] and path == today
        return (0, GENESIS), False

    def close(self) -> None:
        self._closing = True  # the refusals still held get their count record in the last write
        if self._held and not self._pending:
            self._write([])
        super().close()
        for fd in (self._file, self._lock):
            if fd is not None:
                os.close(fd)
        self._file = None


def _tail_head(path: Path) -> tuple[tuple[int, str], bool] | None:
    """(seq, hash) of the last line of `path` and whether that line was cut short; None for an
    empty file. The seq is the last whole record's, plus one for a cut line after it."""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        for span in (_SMALL_TAIL, _TAIL_BYTES):  # a record is a few hundred bytes
            f.seek(max(0, size - span))
            tail = f.read()
            lines = [line for line in tail.split(b"\n") if line]
            if len(lines) >= 2 or span >= size:
                break
    torn = not tail.endswith(b"\n")
    last = lines[-1]
    seq = 0
    for line in reversed(lines):
        try:
            seq = int(json.loads(line)["seq"]) + (line is not last)
            break
        except (ValueError, KeyError, TypeError):
            continue
    return (seq, digest(last)), torn
