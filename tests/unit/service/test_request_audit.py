"""The per-request audit trail (#38 item 3): the chain the gateway writes verifies, and an edit, a
gap, a torn or cut tail and a rewritten chain are each found, at their file and line."""

import asyncio
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service import audit_chain, request_audit
from service.request_audit import RequestAudit, day_file


def _record(i: int) -> dict[str, object]:
    return {
        "ts": f"t{i}",
        "subject": f"key{i % 3}",
        "tenant": "a",
        "model": "m",
        "status": 200,
        "prompt_tokens": i,
        "completion_tokens": 2 * i,
    }


def _write(audit: RequestAudit, first: int, count: int) -> None:
    async def go() -> None:
        for i in range(first, first + count):
            audit.emit(_record(i))
        audit.flush()

    asyncio.run(go())


def _files(folder: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(folder.glob("requests-*.jsonl"))]


def _today(folder: Path) -> Path:
    return day_file(folder, datetime.now(UTC).date().isoformat())


def test_two_workers_and_a_restart_write_one_chain_that_verifies(tmp_path: Path) -> None:
    a, b = RequestAudit(tmp_path, 30), RequestAudit(tmp_path, 30)
    _write(a, 0, 5)
    _write(b, 5, 3)  # another worker: it must read a's head
    _write(a, 8, 2)  # and a must read b's
    a.close()
    b.close()
    again = RequestAudit(tmp_path, 30)  # a restart continues the chain
    _write(again, 10, 1)
    again.close()
    verdict = audit_chain.verify(_files(tmp_path))
    assert verdict.ok, verdict.problems
    assert [r["seq"] for r in verdict.records] == list(range(1, 12))
    assert [r["prompt_tokens"] for r in verdict.records] == list(range(11))
    assert stat.S_IMODE(_today(tmp_path).stat().st_mode) == 0o600
    assert "prompt" not in verdict.records[0] and verdict.records[0]["prev"] == audit_chain.GENESIS


def _chain(tmp_path: Path, count: int = 6) -> Path:
    audit = RequestAudit(tmp_path, 30)
    _write(audit, 0, count)
    audit.close()
    return _today(tmp_path)


def test_an_edited_record_is_found_at_its_line(tmp_path: Path) -> None:
    path = _chain(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"prompt_tokens":2', b'"prompt_tokens":9')
    path.write_bytes(b"\n".join(lines))
    verdict = audit_chain.verify(_files(tmp_path))
    assert [(p.line, p.kind) for p in verdict.problems] == [(3, "edited")]


def test_a_removed_record_is_a_gap(tmp_path: Path) -> None:
    path = _chain(tmp_path)
    lines = path.read_bytes().split(b"\n")
    del lines[3]
    path.write_bytes(b"\n".join(lines))
    verdict = audit_chain.verify(_files(tmp_path))
    assert [(p.line, p.kind) for p in verdict.problems] == [(4, "gap")]
    assert "records 4..4 are missing" in verdict.problems[0].detail


def test_a_tail_cut_inside_a_record_is_torn_and_the_writer_goes_on_after_it(tmp_path: Path) -> None:
    path = _chain(tmp_path)
    path.write_bytes(path.read_bytes()[:-20])
    verdict = audit_chain.verify(_files(tmp_path))
    assert [(p.line, p.kind) for p in verdict.problems] == [(6, "torn")]
    audit = RequestAudit(tmp_path, 30)
    _write(audit, 6, 2)
    audit.close()
    verdict = audit_chain.verify(_files(tmp_path))
    assert [(p.line, p.kind) for p in verdict.problems] == [(6, "torn")]  # the rest chains on
    assert verdict.records[-1]["seq"] == 8


def test_whole_records_cut_off_the_end_are_found_against_the_head_seen_before(tmp_path: Path) -> None:
    path = _chain(tmp_path)
    seen = audit_chain.verify(_files(tmp_path)).head
    assert seen is not None and seen[0] == 6
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:4]) + b"\n")
    assert audit_chain.verify(_files(tmp_path)).ok  # the chain alone cannot tell
    verdict = audit_chain.verify(_files(tmp_path), known=seen)
    assert [p.kind for p in verdict.problems] == ["truncated"]


def test_a_chain_rewritten_with_new_hashes_is_found_against_the_head_seen_before(tmp_path: Path) -> None:
    path = _chain(tmp_path)
    seen = audit_chain.verify(_files(tmp_path)).head
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    records[1]["completion_tokens"] = 0
    prev, out = audit_chain.GENESIS, []
    for r in records:  # a forger recomputes every hash after the change
        body = {k: v for k, v in r.items() if k not in ("seq", "prev")}
        line = audit_chain.seal(body, r["seq"], prev)
        prev = audit_chain.digest(line)
        out.append(line)
    path.write_bytes(b"\n".join(out) + b"\n")
    assert audit_chain.verify(_files(tmp_path)).ok
    assert [p.kind for p in audit_chain.verify(_files(tmp_path), known=seen).problems] == ["rewritten"]


def test_a_file_older_than_the_retention_is_removed_and_the_chain_goes_on_across_days(tmp_path: Path) -> None:
    today = datetime.now(UTC).date()
    old = day_file(tmp_path, (today - timedelta(days=40)).isoformat())
    old.write_bytes(b"")
    days = [day_file(tmp_path, (today - timedelta(days=n)).isoformat()) for n in (2, 1)]
    for i, day in enumerate(days):  # as if written on those days
        audit = RequestAudit(tmp_path, 30)
        _write(audit, 3 * i, 3)
        audit.close()
        _today(tmp_path).rename(day)
    audit = RequestAudit(tmp_path, 30)
    _write(audit, 6, 2)
    audit.close()
    assert not old.exists() and all(d.exists() for d in days)
    verdict = audit_chain.verify(_files(tmp_path))
    assert verdict.ok and [r["seq"] for r in verdict.records] == list(range(1, 9))
    # a day's file removed in the middle is a gap at the next day's first record
    days[1].write_bytes(b"")
    verdict = audit_chain.verify(_files(tmp_path))
    assert [(p.file, p.line, p.kind) for p in verdict.problems] == [(_today(tmp_path).name, 1, "gap")]
    # the oldest day's removed: the chain cannot tell it from retention; it starts later
    days[0].unlink()
    verdict = audit_chain.verify(_files(tmp_path))
    assert verdict.ok and verdict.first_seq == 7


def _refusal(i: int) -> dict[str, object]:
    return {"ts": f"r{i:03}", "subject": "-", "tenant": None, "model": None, "status": 401 if i % 2 else 429}


def test_past_the_daily_cap_refusals_are_counted_in_chained_records_and_answers_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    told: list[int] = []
    audit = RequestAudit(tmp_path, 30, max_bytes_per_day=1000, on_unrecorded=told.append)
    _write(audit, 0, 8)  # answers: past 1000 bytes
    assert _today(tmp_path).stat().st_size >= 1000

    async def flood(first: int, count: int) -> None:
        for i in range(first, first + count):
            audit.emit(_refusal(i))
        audit.emit(_record(100 + first))  # an answer among the refusals
        audit.flush()

    asyncio.run(flood(0, 30))  # within the minute: held, no count record yet
    assert told == [30]
    monkeypatch.setattr(request_audit, "SUMMARY_EVERY_S", 0.0)
    asyncio.run(flood(30, 5))  # a minute on: the count record goes out with this batch
    monkeypatch.setattr(request_audit, "SUMMARY_EVERY_S", 60.0)
    asyncio.run(flood(35, 4))
    audit.close()  # the last four get their count record at close
    assert told == [30, 5, 4]

    verdict = audit_chain.verify(_files(tmp_path))
    assert verdict.ok, verdict.problems
    assert [r["seq"] for r in verdict.records] == list(range(1, len(verdict.records) + 1))
    assert not [r for r in verdict.records if r.get("status") in (401, 429)]  # none one by one
    answers = [r["prompt_tokens"] for r in verdict.records if r.get("status") == 200]
    assert answers == [*range(8), 100, 130, 135]
    counts = [r for r in verdict.records if r.get("event") == request_audit.NOT_RECORDED]
    assert [(c["count"], c["first_ts"], c["last_ts"]) for c in counts] == [(35, "r000", "r034"), (4, "r035", "r038")]
    assert counts[0]["statuses"] == {"401": 17, "429": 18} and counts[0]["max_bytes_per_day"] == 1000


def test_under_the_cap_or_without_one_every_refusal_is_a_record(tmp_path: Path) -> None:
    for cap in (0, 1 << 20):
        folder = tmp_path / str(cap)
        audit = RequestAudit(folder, 30, max_bytes_per_day=cap)

        async def go(audit: RequestAudit = audit) -> None:
            for i in range(50):
                audit.emit(_refusal(i))
            audit.flush()

        asyncio.run(go())
        audit.close()
        verdict = audit_chain.verify(_files(folder))
        assert verdict.ok and len(verdict.records) == 50
        assert not [r for r in verdict.records if "event" in r]


def test_refusals_held_at_the_days_turn_are_counted_first_in_the_new_days_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    today = datetime.now(UTC)

    class Tomorrow(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return today + timedelta(days=1)

    audit = RequestAudit(tmp_path, 30, max_bytes_per_day=500)
    _write(audit, 0, 5)

    async def refuse(first: int) -> None:
        for i in range(first, first + 3):
            audit.emit(_refusal(i))
        audit.flush()

    asyncio.run(refuse(0))
    monkeypatch.setattr(request_audit, "datetime", Tomorrow)
    asyncio.run(refuse(3))  # tomorrow's file is empty: these are records again
    audit.close()
    verdict = audit_chain.verify(_files(tmp_path))
    assert verdict.ok, verdict.problems
    second = [json.loads(line) for line in sorted(tmp_path.glob("requests-*.jsonl"))[1].read_text().splitlines()]
    assert [(r.get("event"), r.get("count"), r.get("status")) for r in second] == [
        (request_audit.NOT_RECORDED, 3, None), (None, None, 401), (None, None, 429), (None, None, 401)
    ]
    assert second[0]["last_ts"] == "r002"  # yesterday's refusals


def test_past_the_cap_a_5xx_and_a_client_that_left_are_still_records(tmp_path: Path) -> None:
    audit = RequestAudit(tmp_path, 30, max_bytes_per_day=1)
    _write(audit, 0, 1)  # past its 1-byte cap

    async def go() -> None:
        for status in (500, 499, 503, 403):
            audit.emit({**_record(9), "status": status})
        audit.flush()

    asyncio.run(go())
    audit.close()
    verdict = audit_chain.verify(_files(tmp_path))
    assert verdict.ok, verdict.problems
    assert [(r.get("status"), r.get("count")) for r in verdict.records] == [
        (200, None), (500, None), (499, None), (503, None), (None, 1)
    ]
