"""`installer release start`: the inventory file's entry of one model starts beside the stable
one (the revision every host runs), is proven through each of its hosts' gateways with the stage
header, takes the first step's share of the model's callers, and is handed to the release
controller on the deployment (installer/release/controller.py), which steps it from then on:
start returns at once, and the control machine may go off.

Everything `up` checks first is checked (prepare: inventory, bundle, preflight, push): the
canary's weights travel in the bundle. The release is recorded before any host changes, so a
run that stops halfway is finished with `installer release abort`; a canary that fails its play
or its gate, or that the controller does not take, is aborted here. A release the controller
already runs (started from any control machine) is refused before anything changes.
"""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from installer.base.errors import InstallerError
from installer.base.runlog import RunLog
from installer.day2 import gate, rolling
from installer.inventory import ServedModel, load_inventory
from installer.preparation import prepare
from installer.preparation.prepare import Reporter
from installer.release import controller, lock, spec, stages, state
from installer.release import gate as release_gate
from installer.release.abort import abort_release
from installer.release.outcome import Outcome
from installer.release.state import Release, ReleaseError
from installer.secrets import keys
from installer.state import deployment_lock, revisions


def split_of(release: Release, s: spec.Sides) -> dict[str, stages.Split]:
    return {release.served_name: stages.split(release.weight, s.canary_spec().release, release.controller or None)}


def check_startable(inventory_path: Path, model: str) -> tuple[Release, ServedModel]:
    """Everything start refuses before any host is touched: a release under way, an unknown
    model, hosts on different revisions, nothing changed, anything changed besides the model's
    entry, another served name."""
    inv = load_inventory(inventory_path)
    state.refuse_second(inv.deployment, model)
    stable = spec.stable_revision(inv.deployment)
    if inv.provider != "baremetal":  # cloud hosts come from Terraform, as the revision recorded them
        inv = inv.model_copy(update={"hosts": stable.inventory().hosts})
    canary = spec.served(inv, model, str(inventory_path))
    before = spec.served(stable.inventory(), model, f"revision {stable.number} (what the hosts run)")
    if spec.same_spec(before, canary):
        raise ReleaseError(
            f"model {model} in {inventory_path} is what revision {stable.number} already runs: nothing to release",
            ["change its `path` (new weights) or its `engine` settings, then start the release"],
        )
    others = spec.other_changes(stable.inventory(), inv, model)
    if others:
        raise ReleaseError(
            f"{inventory_path} changes more than model {model} against revision {stable.number} (what the hosts "
            f"run): {', '.join(others)}; a release moves one model, and its promote would apply the rest at once",
            [f"revert those changes, or apply them first with `installer up -i {inventory_path}` (with model "
             f"{model} as revision {stable.number} has it), then start the release"],
        )
    if before.served_name != canary.served_name:
        raise ReleaseError(
            f"model {model} is served as {before.served_name!r}, the inventory says {canary.served_name!r}: "
            "callers of a release keep asking for one name",
            ["keep served_name for the release; a new name is a new model (`installer up`)"],
        )
    return Release(model, canary.served_name, stable.number, 0, tuple(canary.release.steps)), canary


def start(
    inventory_path: Path,
    reporter: Reporter,
    *,
    model: str,
    bundle_path: Path | None = None,
    trusted_keys: tuple[Path, ...] = (),
    insecure: bool = False,
    drain_timeout_s: float = 120,
    on_runlog: Callable[[RunLog], None] = lambda _l: None,
) -> Outcome:
    deployment = load_inventory(inventory_path).deployment
    with deployment_lock.held(deployment, "release start"), lock.held(deployment, "start"):
        return _locked_start(inventory_path, reporter, model, bundle_path, trusted_keys, insecure, drain_timeout_s,
                             on_runlog)


def _locked_start(
    inventory_path: Path, reporter: Reporter, model: str, bundle_path: Path | None, trusted_keys: tuple[Path, ...],
    insecure: bool, drain_timeout_s: float, on_runlog: Callable[[RunLog], None],
) -> Outcome:
    release, canary_spec = check_startable(inventory_path, model)
    target_inv = load_inventory(inventory_path)
    stable = revisions.get(target_inv.deployment, release.stable)
    controller.refuse_running(stable.inventory())
    # The bundle of what the hosts run, with the canary's weights beside stable's when they differ.
    p = prepare.prepare(inventory_path, reporter, command="release-start", bundle_path=bundle_path,
                        trusted_keys=trusted_keys, insecure=insecure, on_runlog=on_runlog,
                        inventory=stable.inventory(), canaries={model: canary_spec})
    deployment = p.inv.deployment
    if target_inv.provider != "baremetal":  # cloud hosts come from Terraform, as provisioned
        target_inv = target_inv.model_copy(update={"hosts": p.inv.hosts})
    if p.manifest.release_id != stable.release_id:
        raise ReleaseError(
            f"the bundle carries release {p.manifest.release_id}, the hosts run {stable.release_id}: new "
            "engine or gateway code is an upgrade, not a gray release of a model",
            ["`installer upgrade` first, or start the release with the hosts' bundle (--bundle)"],
        )
    canary = revisions.next_revision(target_inv, p.manifest, p.root, p.playbooks_dir, canary=model,
                                     canary_over=stable.number, deployment_plan=p.deployment_plan)
    release = Release(model, release.served_name, stable.number, canary.number, release.steps)
    release = replace(release, controller=controller.release_id(deployment, release))
    state.save(deployment, release)  # before any host changes: abort can always finish it
    s = spec.sides(deployment, release)
    out = Outcome("start", model, p.log)
    try:
        _start(p, s, out, reporter, drain_timeout_s)
    finally:
        out.log.write_summary(out.summary())
    return out


def _start(p: prepare.Prepared, s: spec.Sides, out: Outcome, reporter: Reporter, drain_timeout_s: float) -> None:
    release, canary, stable = s.release, s.canary, s.stable
    deployment, model = stable.deployment, release.model
    inv = s.stable_inv
    hosts = list(inv.hosts)  # every gateway routes to the canary engines, so every host is configured
    try:
        dp = p.deployment_plan  # stable's inventory with the canary beside the model
        canaries = spec.engines_of(dp, model, "canary")
        with out.step(reporter, "configure canary", f"revision {canary.number} beside {stable.number}"):
            problems = gate.play_problems(rolling.run_site(dp, canary, hosts, p.log, "start", reporter.task), hosts)
            if problems:
                raise ReleaseError("the canary could not be configured",
                                   [f"{h}: {why}" for h, why in problems.items()])
        with out.step(reporter, "gate canary", ", ".join(n for ns in canaries.values() for n in ns)):
            problems = release_gate.prove_stage(inv, canaries, "canary", release.served_name,
                                                s.canary_spec().task, keys.ensure_probe_key())
            if problems:
                raise ReleaseError("the canary failed its gate", [f"{h}: {why}" for h, why in problems.items()])
        release = release.advanced()
        on = controller.host(inv).name
        with out.step(reporter, "first step", f"canary takes {release.weight}% of {release.served_name}; "
                                              f"the release controller on {on} steps it from here"):
            # The controller first: the gateways follow its weights once the stages file names the release.
            controller.start(inv, controller.spec_of(release, s))
            stages.write(inv, split_of(release, s))
            state.save(deployment, release)
    except InstallerError as exc:
        reporter.note(f"[bold red]{exc}[/]: aborting the release")
        abort_release(s, out, reporter, drain_timeout_s, f"start failed: {exc}")
        raise ReleaseError(f"{exc}; the release was aborted (stable serves everything)", exc.details) from exc
    revisions.record(deployment, canary, {h.name: True for h in hosts}, p.log, command="release start")
    out.weight = release.weight
