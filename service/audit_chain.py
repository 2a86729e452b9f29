"""The request audit trail's chain: how a record links to the one before it, and how a host's
files are checked (docs/audit.md). The gateway writes it (service/request_audit.py); the control
machine checks what it collected (installer/flows/request_audit.py) with the same rules.

A record is one JSON line. `seq` counts the host's records from 1; `prev` is the sha256 (hex) of
the previous record's line exactly as written (its bytes, without the newline), GENESIS for the
first. So a changed byte breaks the next record's `prev` (an edit), a removed line breaks `seq`
(a gap), and a line cut short is no JSON (a torn record). What the chain alone cannot show: the
newest records cut off (nothing follows them), or the whole chain rewritten from some record on
with new hashes. `verify` takes the head a previous check saw (`known`), which the control
machine keeps, and reports a chain that no longer reaches it or holds another record there.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GENESIS = "0" * 64
FILE_PREFIX = "requests-"  # + YYYY-MM-DD (UTC day written) + FILE_SUFFIX
FILE_SUFFIX = ".jsonl"
# The `event` of a record that counts refusals a capped day did not record one by one
# (service/request_audit.py); chained like any record.
NOT_RECORDED = "refusals_not_recorded"


def digest(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def seal(record: dict[str, Any], seq: int, prev: str) -> bytes:
    """The line for `record`, chained after the record whose hash is `prev`."""
    return json.dumps({"seq": seq, **record, "prev": prev}, separators=(",", ":"), default=str).encode()


@dataclass(frozen=True)
class Problem:
    file: str
    line: int  # 1-based, in `file`
    kind: str  # edited, gap, torn, reordered, truncated, rewritten
    detail: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.kind}: {self.detail}"


@dataclass
class Verdict:
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    first_seq: int | None = None  # the oldest record present (older ones: removed by retention, or before --since)
    head: tuple[int, str] | None = None  # (seq, hash) of the newest intact record

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(files: Iterable[tuple[str, bytes]], known: tuple[int, str] | None = None) -> Verdict:
    """Check one host's files, oldest first (their names sort by day). `known`: the (seq, hash)
    of the newest record an earlier check saw on this host."""
    out = Verdict()
    prev_hash: str | None = None
    prev_seq: int | None = None
    prev_at = ("-", 0)  # the previous line's file and line number
    hashes: dict[int, str] = {}
    for name, data in files:
        if data and not data.endswith(b"\n"):
            # Every write is whole lines: a last line without its newline was cut short.
            lines = data.split(b"\n")
            out.problems.append(Problem(name, len(lines), "torn", "the file ends inside a record (cut short)"))
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                seq, prev = record["seq"], record["prev"]
                if not isinstance(seq, int) or not isinstance(prev, str):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                if number < len(lines) or data.endswith(b"\n"):
                    out.problems.append(Problem(name, number, "torn", "not a whole record"))
                # reported once, here: the next record is checked for its seq only
                prev_hash, prev_seq, prev_at = None, None, (name, number)
                continue
            here = digest(line)
            if prev_at[1] == 0:
                out.first_seq = seq
                if seq == 1 and prev != GENESIS:
                    out.problems.append(Problem(name, number, "edited", "the first record does not start the chain"))
            elif prev_seq is not None and seq != prev_seq + 1:
                if seq > prev_seq + 1:
                    out.problems.append(
                        Problem(name, number, "gap", f"records {prev_seq + 1}..{seq - 1} are missing before it")
                    )
                else:
                    out.problems.append(
                        Problem(name, number, "reordered", f"seq {seq} after {prev_seq}: a record moved or inserted")
                    )
            elif prev_hash is not None and prev != prev_hash:
                out.problems.append(
                    Problem(
                        *prev_at,
                        "edited",
                        f"changed after it was written: the next record ({name}:{number}) holds another hash for it",
                    )
                )
            prev_hash, prev_seq, prev_at = here, seq, (name, number)
            hashes.setdefault(seq, here)
            out.records.append(record)
            out.head = (seq, here)
    if known is not None:
        seq, want = known
        last = out.head[0] if out.head else 0
        if last < seq:
            out.problems.append(
                Problem(
                    "-",
                    0,
                    "truncated",
                    f"the chain ends at seq {last}, but an earlier check saw it reach seq {seq}: "
                    "newer records were removed",
                )
            )
        elif seq in hashes and hashes[seq] != want:
            out.problems.append(
                Problem(
                    "-",
                    0,
                    "rewritten",
                    f"record {seq} is not the one an earlier check saw: "
                    "the chain was rewritten from there on or before",
                )
            )
    return out
