"""`installer upgrade` and `installer rollback`: pick the target revision, then roll to it."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from installer.base.runlog import RunLog
from installer.bundle import layout as bundle_layout
from installer.bundle import push as bundle_push
from installer.day2.rolling import RollResult, roll
from installer.hosts.ssh import targets
from installer.inventory import load_inventory
from installer.preparation import prepare
from installer.state import revisions
from installer.state.revisions import Revision, StateError


@dataclass
class DayTwoResult:
    roll: RollResult
    run_dir: Path
    phases: dict[str, float]


def _require_installed(deployment: str) -> dict[str, int]:
    hosts = revisions.host_revisions(deployment)
    if not hosts:
        raise StateError(
            f"deployment {deployment} has no installed revision on record",
            ["install it first with `installer up -i INVENTORY`"],
        )
    return hosts


def _finish(result: RollResult, log: RunLog, reporter: prepare.Reporter) -> DayTwoResult:
    log.write_summary({
        "success": result.success,
        "target_revision": result.target.number,
        "bundle_id": result.target.bundle_id,
        "stopped_at": result.stopped_at,
        "hosts": [s.__dict__ for s in result.steps],
    })
    return DayTwoResult(result, log.dir, dict(log.phases))


def upgrade(
    inventory_path: Path,
    reporter: prepare.Reporter,
    *,
    bundle_path: Path | None = None,
    trusted_keys: tuple[Path, ...] = (),
    insecure: bool = False,
    batch_size: int = 1,
    drain_timeout_s: float = 120,
    on_runlog: Callable[[RunLog], None] = lambda _l: None,
) -> DayTwoResult:
    """Everything `up` checks first (inventory, bundle signature and bytes, preflight, push),
    then host by host to the new revision."""
    _require_installed(load_inventory(inventory_path).deployment)
    p = prepare.prepare(
        inventory_path, reporter, command="upgrade", bundle_path=bundle_path,
        trusted_keys=trusted_keys, insecure=insecure, on_runlog=on_runlog,
    )
    target = revisions.next_revision(p.inv, p.manifest, p.root, p.playbooks_dir, deployment_plan=p.deployment_plan)
    reporter.note(f"target: revision {target.number} (release {target.release_id})")
    with prepare.timed(p.log, reporter, "roll"):
        result = roll(
            target, p.log, target_plan=p.deployment_plan, batch_size=batch_size, drain_timeout_s=drain_timeout_s,
            note=reporter.note, on_task=reporter.task,
        )
    return _finish(result, p.log, reporter)


def rollback(
    inventory_path: Path,
    reporter: prepare.Reporter,
    *,
    to: int | None = None,
    batch_size: int = 1,
    drain_timeout_s: float = 120,
) -> DayTwoResult:
    inv = load_inventory(inventory_path)
    revisions.refuse_during_release(inv.deployment, "rollback")  # it would undo the canary
    _require_installed(inv.deployment)
    number = to if to is not None else revisions.previous_revision(inv.deployment)
    if number is None:
        raise StateError(
            f"deployment {inv.deployment} has no single previous revision to return to",
            ["name one with `installer rollback --to N` (`installer releases` lists them)"],
        )
    target: Revision = revisions.get(inv.deployment, number)
    log = RunLog("rollback", inv.deployment)
    reporter.note(f"target: revision {target.number} (release {target.release_id}, {target.created})")
    root = Path(target.bundle_root)
    if root.is_dir():
        # Usually a no-op: the hosts kept the bundle. Sent again where one was cleaned away.
        with prepare.timed(log, reporter, "push"):
            old = target.inventory()
            bundle_push.push(
                targets(old), root, target.manifest(), reporter.push_progress, bundle_layout.host_targets(old)
            )
    else:
        reporter.note(f"bundle {target.bundle_id[:12]} is not on this machine; using the hosts' copies")
    with prepare.timed(log, reporter, "roll"):
        result = roll(
            target, log, batch_size=batch_size, drain_timeout_s=drain_timeout_s,
            note=reporter.note, on_task=reporter.task,
        )
    return _finish(result, log, reporter)
