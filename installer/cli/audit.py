"""`installer audit [--verify] [--json]`: the deployment's audit trail (installer/audit.py)."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from installer import audit
from installer.cli.root import app
from installer.ui import console, table


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
) -> None:
    """Show who changed the deployment, when, with what, and how it ended (or check the chain)."""
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
