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
    return f"{user} (sudo {entry['sudo_user']})" if entry.get("sudo_user") else user


def _result(entry: dict[str, Any]) -> str:
    result = str(entry.get("result", "?"))
    return f"{result}: {entry['error']}"[:100] if entry.get("error") else result


@app.command("audit")
def audit_cmd(
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="The deployment whose trail to show (its state is next to it)."),
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the hash chain; exit 1 naming the first broken line.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show who changed the deployment, when, with what, and how it ended (or check the chain)."""
    path = audit.log_path()
    if verify:
        verdict = audit.verify(path)
        if as_json:
            print(json.dumps({
                "file": str(path), "ok": verdict.ok, "entries": verdict.entries,
                "last_hash": verdict.last_hash, "broken_line": verdict.broken_line, "why": verdict.why or None,
            }, indent=2))
            if not verdict.ok:
                raise typer.Exit(1)
            return
        if not verdict.ok:
            raise audit.AuditError(
                f"{path}:{verdict.broken_line}: {verdict.why}",
                [f"the {verdict.entries} entries before it chain correctly; the last of them has hash "
                 f"{verdict.last_hash}"],
            )
        console.print(
            f"[green]intact:[/] {verdict.entries} entries in {path}, last hash {verdict.last_hash} "
            "(a cut tail leaves no trace inside the file: compare the count and last hash with a copy)",
            soft_wrap=True,
        )
        return
    entries = audit.read(path)
    if as_json:
        print(json.dumps(entries, indent=2, ensure_ascii=False))
        return
    if not entries:
        console.print(f"no audit entries in {path}")
        return
    rows = [
        [str(e.get("time", "?")), _user(e), str(e.get("command", "?")), _result(e)] for e in entries
    ]
    console.print(table(f"audit trail {path}", ["time", "user", "command", "result"], rows))
