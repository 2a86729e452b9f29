"""`installer plan` and `installer down`: the Terraform side of a deployment.

`installer up` provisions through the same library (installer.terraform.provision), called
from the deploy flow's provision phase.
"""

import shlex
from pathlib import Path
from typing import Annotated

import typer

from installer import deploy
from installer import plan as deployment_plan
from installer.bundle import terraform_tools
from installer.cli import deploy as deploy_cli
from installer.cli.gpu import print_fit_section
from installer.cli.root import InventoryOpt, app
from installer.day2 import revisions, uninstall
from installer.errors import AnsibleError
from installer.inventory import Inventory, load_inventory
from installer.runlog import RunLog
from installer.terraform import contract, provision
from installer.terraform.cli import ChangeSummary
from installer.ui import console, table

BundleOpt = Annotated[
    Path | None,
    typer.Option(help="Bundle that carries terraform and its providers (offline machines)."),
]
TrustedKeyOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--trusted-key",
        help="Public key (.pub) whose bundle signatures are accepted; repeatable. "
        "Default: every *.pub in the state's keys/.",
        show_default=False,
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="Accept an unsigned or untrusted --bundle, and run its terraform here. Unsafe.",
    ),
]
# Changes that bring up new machines: Ansible has nothing to compare them with yet.
_NEW_MACHINE = ("create", "replace")


def _note(text: str) -> None:
    console.print(f"  {text}")


def _print_changes(title: str, summary: ChangeSummary) -> None:
    rows = [[c.action, c.address] for c in summary.changes if c.action != "noop"]
    if rows:
        console.print(table(title, ["action", "resource"], rows))
    console.print(f"terraform: {provision.describe(summary)}")
    for warning in summary.warnings:
        console.print(f"[yellow]{warning.line()}[/]")


@app.command()
def plan(
    inventory: InventoryOpt,
    bundle: BundleOpt = None,
    trusted_key: TrustedKeyOpt = None,
    insecure: InsecureOpt = False,
) -> None:
    """Show what `installer up` would change: cloud resources (Terraform), then hosts (Ansible)."""
    inv = load_inventory(inventory)
    # Does the model fit the GPUs at all? Cheap, offline, and worth knowing before anything else.
    print_fit_section(inv)
    commands = deployment_plan.engine_commands_before_preflight(inv)  # exactly what `up` deploys
    if commands is None:
        console.print("engines: laid out at preflight for the GPUs the hosts report (no gpu.type/gpu.count)")
    for host, unit, argv in commands or []:
        console.print(f"{host} {unit}: {shlex.join(argv)}", soft_wrap=True)
    trusted = tuple(trusted_key or ())
    if inv.provider != "baremetal":
        # The bundle's terraform runs here with the cloud credentials: its signature first.
        opened = deploy.open_verified(bundle, trusted, insecure, _note) if bundle else None
        ws = provision.prepare(inv, tools=terraform_tools.from_bundle(opened), note=_note)
        summary, plan_file = provision.plan(ws)
        plan_file.unlink(missing_ok=True)  # `up` plans again: the state may move meanwhile
        _print_changes(f"terraform plan — deployment {inv.deployment} ({inv.provider})", summary)
        existing = contract.parse(ws.tf.outputs())
        new_machines = [
            c for c in summary.changes if c.action in _NEW_MACHINE and "_instance." in c.address
        ]
        if new_machines or not existing:
            console.print(
                f"ansible: {len(new_machines)} new machine(s); `installer up` creates them, then "
                "runs every role on every host (nothing to compare with before they exist)"
            )
            return
    # The hosts exist: Ansible's check mode tells what it would change on them.
    deploy_cli.up(inventory=inventory, bundle=bundle, trusted_key=list(trusted), insecure=insecure, check=True)


@app.command()
def down(
    inventory: InventoryOpt,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Destroy without asking.")] = False,
) -> None:
    """Remove the deployment: private-llm from bare-metal hosts, or the cloud resources (asks first)."""
    inv = load_inventory(inventory)
    if inv.provider == "baremetal":
        remove_from_hosts(inv, yes)
        return
    ws = provision.prepare(inv, note=_note)
    summary, plan_file = provision.plan(ws, destroy=True)
    if not summary.remove:
        plan_file.unlink(missing_ok=True)
        console.print(f"nothing to destroy: deployment {inv.deployment} has no cloud resources")
        return
    _print_changes(f"terraform destroy — deployment {inv.deployment} ({inv.provider})", summary)
    question = f"Destroy these {summary.remove} resource(s) of deployment {inv.deployment}?"
    if not yes and not typer.confirm(question, default=False):
        plan_file.unlink(missing_ok=True)
        console.print("[yellow]kept:[/] nothing was destroyed")
        raise typer.Exit(1)
    done = provision.apply(ws, plan_file, _note)
    console.print(f"[green]destroyed:[/] {done.remove} resource(s) of deployment {inv.deployment}")


def remove_from_hosts(inv: Inventory, yes: bool) -> None:
    names = ", ".join(h.name for h in inv.hosts)
    question = f"Remove private-llm (services, files, user) from {len(inv.hosts)} host(s): {names}?"
    if not yes and not typer.confirm(question, default=False):
        console.print("[yellow]kept:[/] nothing was removed")
        raise typer.Exit(1)
    log = RunLog("down", inv.deployment)
    pb = uninstall.uninstall(inv, list(inv.hosts), log.dir)
    rows = []
    for h in inv.hosts:
        hr = pb.hosts.get(h.name)
        state = "removed" if hr and hr.success else "FAILED"
        rows.append([h.name, h.address, state, str(hr.changed) if hr else "-", hr.error[:80] if hr else "unreachable"])
    columns = ["host", "address", "state", "changed", "detail"]
    console.print(table(f"down — deployment {inv.deployment}", columns, rows))
    removed = [h.name for h in inv.hosts if pb.hosts.get(h.name) and pb.hosts[h.name].success]
    revisions.forget_hosts(inv.deployment, removed)
    log.write_summary({"success": pb.success, "removed": removed})
    if not pb.success:
        raise AnsibleError("private-llm could not be removed from every host; see the run log", [str(log.dir)])
    console.print(f"[green]removed:[/] private-llm from {len(removed)} host(s)")
