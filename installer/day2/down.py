"""`installer down`: private-llm removed from bare-metal hosts (and forgotten by the revision
record), or a cloud deployment's resources destroyed through Terraform.

The command asks before either: a destroy is planned first (`plan_destroy`), shown, and applied
only once confirmed (`destroy`), so what is destroyed is what was shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from installer.base.runlog import RunLog
from installer.day2 import uninstall
from installer.inventory import Inventory
from installer.state import revisions
from installer.terraform import provision
from installer.terraform.cli import ChangeSummary


@dataclass(frozen=True)
class HostRemoval:
    name: str
    address: str
    removed: bool
    changed: str  # "-" when the host gave no result
    detail: str  # the host's error, or "unreachable"


@dataclass(frozen=True)
class Removal:
    hosts: list[HostRemoval]
    success: bool  # the playbook's own verdict: its exit code too, not only the hosts' results
    log_dir: Path

    @property
    def removed(self) -> list[str]:
        return [h.name for h in self.hosts if h.removed]


def remove_from_hosts(inv: Inventory) -> Removal:
    """Run the uninstall role on every host; the hosts it cleaned leave the revision record."""
    log = RunLog("down", inv.deployment)
    pb = uninstall.uninstall(inv, list(inv.hosts), log.dir)
    hosts = []
    for h in inv.hosts:
        hr = pb.hosts.get(h.name)
        hosts.append(
            HostRemoval(
                h.name, h.address, bool(hr and hr.success),
                str(hr.changed) if hr else "-", hr.error if hr else "unreachable",
            )
        )
    removal = Removal(hosts, pb.success, log.dir)
    revisions.forget_hosts(inv.deployment, removal.removed)
    log.write_summary({"success": removal.success, "removed": removal.removed})
    return removal


@dataclass(frozen=True)
class PendingDestroy:
    """A saved destroy plan: applied as shown, or discarded."""

    workspace: provision.Workspace
    summary: ChangeSummary
    plan_file: Path

    def discard(self) -> None:
        self.plan_file.unlink(missing_ok=True)


def plan_destroy(inv: Inventory, note: Callable[[str], None]) -> PendingDestroy | None:
    """The plan that destroys the deployment's cloud resources; None when it has none."""
    ws = provision.prepare(inv, note=note)
    summary, plan_file = provision.plan(ws, destroy=True)
    pending = PendingDestroy(ws, summary, plan_file)
    if not summary.remove:
        pending.discard()
        return None
    return pending


def destroy(pending: PendingDestroy, note: Callable[[str], None]) -> ChangeSummary:
    return provision.apply(pending.workspace, pending.plan_file, note)
