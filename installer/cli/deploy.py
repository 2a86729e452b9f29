"""`installer validate` and `installer up`."""

from pathlib import Path
from typing import Annotated

import typer

from installer import deploy
from installer.cli.root import InventoryOpt, app
from installer.errors import AnsibleError
from installer.inventory import load_inventory
from installer.inventory_checks import check_inventory
from installer.ui import RichReporter, console, table


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
) -> None:
    """Validate, bundle, preflight, push and configure: bring every host to a serving state."""
    inv = load_inventory(inventory)
    reporter = RichReporter([h.name for h in inv.hosts])
    if insecure and bundle:
        console.print(
            "[bold red on yellow] INSECURE [/] [bold red]--insecure: the bundle is used even if it "
            "is unsigned or signed by an unknown key; its origin is not verified[/]"
        )
    result = deploy.up(
        inventory, reporter, bundle_path=bundle, check=check, prune=prune,
        trusted_keys=tuple(trusted_key or ()), insecure=insecure, adopt=adopt,
    )
    # The gpu column only where a host ran the GPU checks: CPU deployments keep their table.
    gpu = any(h.gpu for h in result.hosts)
    rows = [
        [h.name, h.address, h.state, str(h.changed), h.endpoint, h.model, h.detail[:80]] + ([h.gpu] if gpu else [])
        for h in result.hosts
    ]
    console.print(table(
        f"deployment {inv.deployment} — release {result.manifest.release_id}",
        ["host", "address", "state", "changed", "endpoint", "model", "detail"] + (["gpu"] if gpu else []), rows,
    ))
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in result.phases.items())
    console.print(f"phases: {timings}")
    console.print(f"run log: {result.run_dir}")
    if not result.success:
        failed = [f"{h.name}: {h.detail}" for h in result.hosts if h.state not in ("ready", "checked")]
        raise AnsibleError(f"{len(failed)} host(s) failed; see the run log", failed)
    if check:
        console.print(f"[yellow]check mode:[/] {result.changed} change(s) would be made")
    elif result.changed == 0:
        console.print("[green]converged:[/] nothing changed on any host (changed=0)")
    else:
        console.print(f"[green]done:[/] {result.changed} change(s) applied; every host serves")
