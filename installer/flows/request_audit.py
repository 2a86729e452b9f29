"""`installer audit --requests`: the gateways' per-request audit trails, collected from every
serving host, checked, and exported (docs/audit.md).

Each host's day files are read as root over the one SSH fan-out (installer/hosts/remote.py) with a
fixed read-only command, and checked here, on the control machine, with the gateway's own chain
rules (service/audit_chain.py): a host's own word that its chain is intact would prove nothing.
The newest record each check saw on each host (its seq and hash) is kept in the state folder
(`request-audit-heads.json`, 0600), so the next check also finds records cut off the end and a
chain rewritten with new hashes, which the chain alone cannot show.
"""

import csv
import io
import json
import shlex
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from installer.base import paths
from installer.base.errors import InstallerError
from installer.base.files import write_private
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Inventory
from installer.inventory.topology import HOST_LAYOUT, serving_hosts
from service import audit_chain

AUDIT_DIR = f"{HOST_LAYOUT['pli_state_dir']}/audit"  # the gateway unit's StateDirectory
HEADS_FILE = "request-audit-heads.json"
COLUMNS = (
    "host",
    "seq",
    "ts",
    "request_id",
    "subject",
    "tenant",
    "path",
    "model",
    "stage",
    "status",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "client",
    "prev",
    # a capped day's count of refusals not recorded one by one (service/request_audit.py)
    "event",
    "count",
)
# The texts audit.retain keeps (service/audit_retain.py): columns only when a record has them, as
# JSON (a message list, or a string in quotes: no cell starts with a spreadsheet formula's `=`).
RETAINED = ("prompt", "prompt_cut", "answer", "answer_cut")


class RequestAuditError(InstallerError):
    """The request audit trails could not be collected."""


@dataclass
class HostTrail:
    host: str
    files: list[tuple[str, bytes]]
    verdict: audit_chain.Verdict


def collect_command(since: date) -> str:
    """The day files written since the day before `since` (a record of `since` may have been
    written just after midnight), as a tar stream; nothing when the host keeps none."""
    after = (since - timedelta(days=1)).isoformat()
    pattern = f"{audit_chain.FILE_PREFIX}*{audit_chain.FILE_SUFFIX}"
    return (
        f"cd {shlex.quote(AUDIT_DIR)} 2>/dev/null || exit 0; "
        f"find . -maxdepth 1 -type f -name {shlex.quote(pattern)} -newermt {after} -print0 "
        "| tar --null -T - -cf -"
    )


def untar(data: bytes) -> list[tuple[str, bytes]]:
    """The day files in a host's tar stream, oldest first (their names sort by day)."""
    if not data:
        return []
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and name.startswith(audit_chain.FILE_PREFIX):
                f = tar.extractfile(member)
                out.append((name, f.read() if f else b""))
    return sorted(out)


def heads_path() -> Path:
    return paths.state_dir() / HEADS_FILE


def _known_heads() -> dict[str, list[Any]]:
    try:
        data = json.loads(heads_path().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RequestAuditError(f"cannot read {heads_path()}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def collect(inv: Inventory, since: date) -> list[HostTrail]:
    """Every serving host's files since `since`, each checked against the head seen before."""
    hosts = serving_hosts(inv)
    if not hosts:
        raise RequestAuditError(f"{inv.deployment} has no serving hosts yet", ["run `installer up` first"])
    results = remote.run([target(inv, h) for h in hosts], collect_command(since), timeout=300)
    failed = remote.failures(results)
    if failed:
        raise RequestAuditError("cannot read the request audit trail of every host", failed)
    known = _known_heads()
    trails = []
    for r in results:
        try:
            files = untar(r.stdout)
        except tarfile.TarError as exc:
            raise RequestAuditError(f"{r.host}: its answer is not the audit files: {exc}") from exc
        head = known.get(r.host)
        trails.append(HostTrail(r.host, files, audit_chain.verify(files, tuple(head) if head else None)))
    return trails


def remember_heads(trails: Iterable[HostTrail]) -> None:
    """Keep each intact host's newest record for the next check (a broken one keeps the old)."""
    heads = _known_heads()
    for t in trails:
        if t.verdict.ok and t.verdict.head is not None:
            heads[t.host] = list(t.verdict.head)
    write_private(heads_path(), json.dumps(heads, indent=2, sort_keys=True) + "\n")


def rows(trails: Iterable[HostTrail], since: date, tenant: str | None = None) -> list[dict[str, Any]]:
    """The records from `since` (UTC) on, of one tenant if given, each with its host."""
    start = datetime(since.year, since.month, since.day, tzinfo=UTC).isoformat(timespec="milliseconds")
    out = []
    for t in trails:
        for record in t.verdict.records:
            if str(record.get("ts", "")) < start:
                continue
            if tenant is not None and record.get("tenant") != tenant:
                continue
            out.append({"host": t.host, **record})
    return sorted(out, key=lambda r: (str(r.get("ts")), r["host"], r.get("seq", 0)))


def unrecorded(trail: HostTrail, since: date) -> int:
    """Refused requests from `since` on that `trail`'s host counted but did not record one by one
    (its day file had reached audit.max_mb_per_day)."""
    start = datetime(since.year, since.month, since.day, tzinfo=UTC).isoformat(timespec="milliseconds")
    return sum(
        int(r.get("count", 0))
        for r in trail.verdict.records
        if r.get("event") == audit_chain.NOT_RECORDED and str(r.get("ts", "")) >= start
    )


def to_jsonl(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in records)


def to_csv(records: Iterable[dict[str, Any]]) -> str:
    records = list(records)
    retained = [c for c in RETAINED if any(c in r for r in records)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=(*COLUMNS, *retained), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for record in records:
        texts: dict[str, str] = {
            c: json.dumps(record[c], ensure_ascii=False) for c in ("prompt", "answer") if c in record
        }
        writer.writerow({**record, **texts})
    return out.getvalue()
