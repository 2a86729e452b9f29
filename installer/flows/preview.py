"""`installer plan`, cloud side: what Terraform would change, and whether the hosts exist yet.

When they do, `plan` goes on with `installer up` in check mode (installer.flows.deploy.up, check=True):
Ansible's check mode tells what would change on them. The GPU fit is installer/flows/gpu_fit.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from installer.bundle import terraform_tools
from installer.inventory import Inventory
from installer.preparation import prepare
from installer.terraform import contract, provision
from installer.terraform.cli import ChangeSummary, ResourceChange

# Changes that bring up new machines: Ansible has nothing to compare them with yet.
_NEW_MACHINE = ("create", "replace")


@dataclass(frozen=True)
class CloudPlan:
    workspace: provision.Workspace
    summary: ChangeSummary
    new_machines: list[ResourceChange] = field(default_factory=list)

    def check_hosts(self) -> bool:
        """Whether Ansible's check mode can say more: the hosts exist and none is new. Reads the
        state's outputs, whose host contract may be broken: asked after the plan is shown."""
        existing = contract.parse(self.workspace.tf.outputs())
        return bool(existing) and not self.new_machines


def cloud_changes(
    inv: Inventory,
    bundle: Path | None,
    trusted_keys: tuple[Path, ...],
    insecure: bool,
    note: Callable[[str], None],
) -> CloudPlan:
    """Terraform's plan for a cloud inventory; the saved plan file is dropped, as `up` plans again
    (the state may move meanwhile)."""
    # The bundle's terraform runs here with the cloud credentials: its signature first.
    opened = prepare.open_verified(bundle, trusted_keys, insecure, note) if bundle else None
    ws = provision.prepare(inv, tools=terraform_tools.from_bundle(opened), note=note)
    summary, plan_file = provision.plan(ws)
    plan_file.unlink(missing_ok=True)
    new_machines = [c for c in summary.changes if c.action in _NEW_MACHINE and "_instance." in c.address]
    return CloudPlan(ws, summary, new_machines)
