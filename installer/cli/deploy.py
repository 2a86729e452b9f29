"""`installer validate` and `installer up`."""

from pathlib import Path
from typing import Annotated

import typer

from installer.cli.root import InventoryOpt, app, run_up
from installer.cli.ui import console
from installer.inventory import load_inventory
from installer.preparation.inventory_checks import check_inventory


@app.command()
def validate(inventory: InventoryOpt) -> None:
    """Check an inventory file and print OK or every problem with file:line."""
    inv = load_inventory(inventory)
    check_inventory(inv)  # what `up` checks before it touches a host
    console.print(
        f"[green]OK[/] {inventory}: deployment {inv.deployment!r}, {len(inv.hosts)} host(s), "
        f"model {inv.model.served_name!r} on {inv.engine.device}"
    )


@app.command()
def up(
    inventory: InventoryOpt,
    bundle: Annotated[
        Path | None,
        typer.Option(help="Prebuilt bundle (tar or directory); default: build it here (cached)."),
    ] = None,
    trusted_key: Annotated[
        list[Path] | None,
        typer.Option(
            "--trusted-key",
            help="Public key (.pub) whose bundle signatures are accepted; repeatable. "
            "Default: every *.pub under .installer/keys/.",
            show_default=False,
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Accept an unsigned or untrusted --bundle (checksums are still checked). Unsafe.",
        ),
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Show what would change on the hosts; change nothing.")
    ] = False,
    prune: Annotated[
        bool,
        typer.Option("--prune", help="Drain and remove private-llm from hosts no longer in the inventory."),
    ] = False,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="Go on when hosts run revisions this state does not know: they get this state's "
            "client keys, CA and Redis password. Default: refuse.",
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Run Ansible on every host even when each matches its last full configure "
            "(the fast path's checksums, links, units and packages).",
        ),
    ] = False,
) -> None:
    """Validate, bundle, preflight, push and configure: bring every host to a serving state."""
    run_up(inventory, bundle, trusted_key or [], insecure, check, prune=prune, adopt=adopt, full=full)
