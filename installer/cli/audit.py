"""`installer audit [--verify] [--json]`: the deployment's audit trail (installer/state/audit.py); with
`--requests`, the gateways' per-request trails from every serving host, checked and exported
(installer/flows/request_audit.py)."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from installer.base.files import write_private
from installer.cli.root import app
from installer.cli.ui import console, table
from installer.flows import request_audit, usage
from installer.inventory import load_inventory
from installer.state import audit


def _user(entry: dict[str, Any]) -> str:
    user = str(entry.get("user", "?"))
    if entry.get("sudo_user"):  # entries written before the login uid was recorded
        return f"{user} (sudo {entry['sudo_user']})"
    run_as = entry.get("run_as")
    return f"{user} (as {run_as})" if run_as and run_as != user else user


def _result(entry: dict[str, Any], ended: set[str]) -> str:
    result = str(entry.get("result", "?"))
    if result == audit.STARTED and entry.get("run") not in ended:
        return "started, no end recorded (killed, or still running)"
    return f"{result}: {entry['error']}"[:100] if entry.get("error") else result


def _verdict_json(path: Path, verdict: audit.Verdict) -> str:
    return json.dumps({
        "file": str(path), "ok": verdict.ok, "entries": verdict.entries, "legacy": verdict.legacy,
        "last_mac": verdict.last_mac, "broken_line": verdict.broken_line, "why": verdict.why or None,
        "fix": list(verdict.fix), "notes": list(verdict.notes),
        "key": str(audit.key_file()), "checkpoint": str(verdict.checkpoint) if verdict.checkpoint else None,
    }, indent=2)


def _print_verdict(path: Path, verdict: audit.Verdict) -> None:
    if not verdict.ok:
        where = f"{path}:{verdict.broken_line}" if verdict.broken_line else str(path)
        intact = (f"the {verdict.entries} entries before it are intact" if verdict.broken_line
                  else f"its {verdict.entries} entries chain correctly")
        last = [f"{intact}; the last of them has mac {verdict.last_mac}"] if verdict.entries else []
        raise audit.AuditError(f"{where}: {verdict.why}", [*verdict.fix, *last])
    if verdict.entries == 0:
        console.print(f"[green]intact:[/] no audit trail in {path}, and no deployment state that needs one",
                      soft_wrap=True)
    else:
        keyed = verdict.entries - verdict.legacy
        console.print(
            f"[green]intact:[/] {verdict.entries} entries in {path} ({keyed} authenticated with the key "
            f"{audit.key_file()}), last mac {verdict.last_mac}; they match the checkpoint {verdict.checkpoint}"
            if keyed else f"[green]intact:[/] {verdict.entries} entries in {path}, last hash {verdict.last_mac}",
            soft_wrap=True,
        )
    for note in verdict.notes:
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)


@app.command("audit")
def audit_cmd(
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="The deployment whose trail to show (its state is next to it)."),
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the keyed chain and its checkpoint; exit 1 naming the problem.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    requests: Annotated[bool, typer.Option(
        "--requests", help="The gateways' per-request trails: collect from every serving host, check, export.",
    )] = False,
    since: Annotated[str, typer.Option(
        "--since", help="With --requests: from this UTC day on: 7d (seven days ago), today, or YYYY-MM-DD.")] = "7d",
    tenant: Annotated[str | None, typer.Option("--tenant", help="With --requests: one tenant's records only.")] = None,
    jsonl: Annotated[Path | None, typer.Option(
        "--jsonl", help="With --requests: write the records here (JSON Lines).")] = None,
    csv_out: Annotated[Path | None, typer.Option(
        "--csv", help="With --requests: write the records here (CSV).")] = None,
) -> None:
    """Show who changed the deployment, when, with what, and how it ended (or check the chain);
    with --requests, who asked which model for how many tokens, from every gateway host."""
    if requests:
        if inventory is None:
            raise typer.BadParameter("--requests reads the deployment's hosts: give --inventory")
        _requests(inventory, since, tenant, jsonl, csv_out, as_json)
        return
    path = audit.log_path()  # not created: looking must leave no state folder behind
    if verify:
        verdict = audit.verify(path)
        if as_json:
            print(_verdict_json(path, verdict))
            if not verdict.ok:
                raise typer.Exit(1)
            return
        _print_verdict(path, verdict)
        return
    entries = audit.read(path)
    if as_json:
        print(json.dumps(entries, indent=2, ensure_ascii=False))
        return
    if not entries:
        console.print(f"no audit entries in {path}")
        return
    ended = {str(e.get("run")) for e in entries if e.get("run") and e.get("result") != audit.STARTED}
    rows = [
        [str(e.get("time", "?")), _user(e), str(e.get("command", "?")), _result(e, ended)] for e in entries
    ]
    console.print(table(f"audit trail {path}", ["time", "user", "command", "result"], rows))


def _requests(inventory: Path, since: str, tenant: str | None, jsonl: Path | None, csv_out: Path | None,
              as_json: bool) -> None:
    first = usage.parse_since(since)
    trails = request_audit.collect(load_inventory(inventory), first)
    records = request_audit.rows(trails, first, tenant)
    if jsonl is not None:
        write_private(jsonl, request_audit.to_jsonl(records))
    if csv_out is not None:
        write_private(csv_out, request_audit.to_csv(records))
    problems = [(t.host, str(p)) for t in trails for p in t.verdict.problems]
    if as_json:
        print(json.dumps({
            "since": first.isoformat(), "tenant": tenant, "records": len(records),
            "hosts": [{"host": t.host, "files": len(t.files), "records": len(t.verdict.records),
                       "first_seq": t.verdict.first_seq, "head": t.verdict.head,
                       "unrecorded_refusals": request_audit.unrecorded(t, first),
                       "problems": [str(p) for p in t.verdict.problems]} for t in trails],
        }, indent=2))
    else:
        rows = [[t.host, str(len(t.files)), str(len(t.verdict.records)), str(t.verdict.first_seq or "-"),
                 str(t.verdict.head[0] if t.verdict.head else "-"), str(request_audit.unrecorded(t, first)),
                 "intact" if t.verdict.ok else f"{len(t.verdict.problems)} problem(s)"] for t in trails]
        # "only counted": refusals past the daily cap, in count records, not one by one (docs/audit.md#size)
        console.print(table(f"request audit since {first.isoformat()} (UTC)",
                            ["host", "files", "records", "first seq", "last seq", "only counted", "chain"], rows))
        written = [str(p) for p in (jsonl, csv_out) if p is not None]
        console.print(f"{len(records)} record(s)" + (f" of tenant {tenant}" if tenant else "")
                      + (f" written to {', '.join(written)}" if written else ""), soft_wrap=True)
    if problems:
        raise audit.AuditError(
            f"the request audit trail of {len({h for h, _ in problems})} host(s) is broken",
            [f"{host}: {problem}" for host, problem in problems],
        )
    request_audit.remember_heads(trails)
