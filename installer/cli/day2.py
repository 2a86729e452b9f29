"""`installer upgrade`, `installer rollback`, `installer releases`."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from installer.base.errors import AnsibleError
from installer.cli.root import InventoryOpt, app
from installer.cli.ui import RichReporter, console, table
from installer.day2 import records
from installer.day2.rolling import summary_rows
from installer.day2.upgrade import DayTwoResult, rollback, upgrade
from installer.inventory import load_inventory
from installer.state import deployment_lock, revisions

BatchOpt = Annotated[int, typer.Option("--batch", min=1, help="Hosts upgraded at a time.")]
DrainOpt = Annotated[
    float, typer.Option("--drain-timeout", help="Seconds to wait for a host's requests to finish.")
]
_COLUMNS = ["host", "from", "to", "action", "drain s", "took s", "detail"]


def _roll(command: str, inventory: Path, run: Callable[[RichReporter], DayTwoResult]) -> None:
    """upgrade and rollback alike: the deployment's lock held for the whole roll (no other command
    changes its hosts meanwhile), a progress line per host, the table of what each batch did."""
    inv = load_inventory(inventory)
    with deployment_lock.held(inv.deployment, command):
        result = run(RichReporter([h.name for h in inv.hosts]))
    _report(f"{command} of {inv.deployment} to revision {result.roll.target.number}", result)


def _report(title: str, result: DayTwoResult) -> None:
    console.print(table(title, _COLUMNS, summary_rows(result.roll)))
    console.print(f"run log: {result.run_dir}")
    if not result.roll.success:
        failed = [f"{s.name}: {s.action}: {s.detail}" for s in result.roll.steps if s.detail]
        raise AnsibleError(
            f"stopped at {result.roll.stopped_at}: its gate failed; it was rolled back and later "
            "hosts were not touched" if result.roll.stopped_at else "the rollout did not complete",
            failed,
        )
    console.print(f"[green]done:[/] every serving host runs revision {result.roll.target.number}")


@app.command("upgrade")
def upgrade_cmd(
    inventory: InventoryOpt,
    bundle: Annotated[Path | None, typer.Option(help="The new bundle (default: build from the checkout).")] = None,
    trusted_key: Annotated[list[Path] | None, typer.Option("--trusted-key", show_default=False)] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Accept an unsigned --bundle. Unsafe.")] = False,
    batch: BatchOpt = 1,
    drain_timeout: DrainOpt = 120,
) -> None:
    """Roll every host to the new revision (inventory + bundle), batch by batch, behind health gates."""
    _roll("upgrade", inventory, lambda reporter: upgrade(
        inventory, reporter, bundle_path=bundle, trusted_keys=tuple(trusted_key or ()), insecure=insecure,
        batch_size=batch, drain_timeout_s=drain_timeout,
    ))


@app.command("rollback")
def rollback_cmd(
    inventory: InventoryOpt,
    to: Annotated[int | None, typer.Option("--to", help="Revision number (default: the previous one).")] = None,
    batch: BatchOpt = 1,
    drain_timeout: DrainOpt = 120,
) -> None:
    """Return every host to the previous revision (or --to N), with the same gates as upgrade."""
    _roll("rollback", inventory, lambda reporter: rollback(
        inventory, reporter, to=to, batch_size=batch, drain_timeout_s=drain_timeout,
    ))


@app.command("releases")
def releases_cmd(inventory: InventoryOpt) -> None:
    """The deployment's revisions, and what each host runs (its own record against ours)."""
    inv = load_inventory(inventory)
    hosts = revisions.host_revisions(inv.deployment)
    rows = [
        [str(r.number), r.created, r.release_id, r.bundle_id[:12], r.config_digest,
         ", ".join(sorted(h for h, n in hosts.items() if n == r.number)) or "-"]
        for r in revisions.revisions(inv.deployment)
    ]
    columns = ["rev", "created", "release", "bundle", "config", "hosts"]
    console.print(table(f"revisions of {inv.deployment}", columns, rows))
    host_rows = [
        [rec.host, str(rec.recorded or "-"), str(rec.on_host or "-"), rec.release_id or "-", rec.drift]
        for rec in records.read(inv)
    ]
    console.print(table("hosts", ["host", "recorded", "on host", "release", "drift"], host_rows))
