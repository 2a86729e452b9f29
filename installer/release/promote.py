"""`installer release promote`: the canary's next step, taken through the release controller
(installer/release/controller.py) after reading its verdict: a canary it rolled back is not
promoted. At 100% its callers are all on the canary, and stable is retired behind it:
  1. the model's stable engines are drained everywhere (they have no callers left but the
     stage header's), reconfigured to the canary's spec, and each proven alone through its
     host's gateway with `X-Release-Stage: stable`;
  2. they are re-admitted and take the model back (the stages file without it: 100% stable);
  3. the canary engines are drained until idle, then every host is configured as the
     inventory's own revision, which has no canary (its units and weights folder go).
The deployment then equals `installer up` of the inventory, recorded as that revision.

That needs the canary engines to stay as they run while stable changes beneath them, which
holds when the release changed engine settings (both stages read one weights folder). A canary
with weights of its own reads `<folder>.canary`, and stable's folder must take those weights
while stable is being replaced: then stable takes the callers back, the canary is removed as
abort does, and a rolling upgrade (installer/day2/rolling.py) moves stable to the inventory,
host by host behind its gates. No request fails either way; on that path callers see the old
weights again until their host's engines are upgraded.
"""

import time
from dataclasses import replace
from pathlib import Path

from installer.base.errors import AnsibleError
from installer.day2 import drain, gate, rolling, upgrade
from installer.planning import plan
from installer.preparation.prepare import Reporter
from installer.release import controller, entry, spec, stages, state
from installer.release import gate as release_gate
from installer.release.abort import abort_release
from installer.release.outcome import Outcome
from installer.release.spec import Sides
from installer.release.start import split_of
from installer.release.state import Release, ReleaseError
from installer.secrets import keys
from installer.state import revisions


def _names(by_host: dict[str, list[str]]) -> list[str]:
    return sorted(n for names in by_host.values() for n in names)


def _canaries(dp: plan.DeploymentPlan) -> list[object]:
    return [e for hp in dp.hosts for e in hp.engines if e.stage == "canary"]


def retire_stable(
    s: Sides, out: Outcome, reporter: Reporter, drain_timeout_s: float, inventory_path: Path
) -> None:
    target_inv = s.target_inv
    both = s.counted(s.with_canary(target_inv))  # stable engines with the canary's spec, canaries still beside them
    if _canaries(both) != _canaries(s.with_canary()):
        _hand_back_and_roll(s, out, reporter, drain_timeout_s, inventory_path)
        return
    _behind_the_canary(s, both, out, reporter, drain_timeout_s)


def _hand_back_and_roll(
    s: Sides, out: Outcome, reporter: Reporter, drain_timeout_s: float, inventory_path: Path
) -> None:
    abort_release(s, out, reporter, drain_timeout_s,
                  "promote of a canary with weights of its own: stable takes the callers back first")
    with out.step(reporter, "rolling upgrade", f"to {inventory_path}"):
        result = upgrade.upgrade(inventory_path, reporter, drain_timeout_s=drain_timeout_s)
        out.rows += [[f"  {st.name}", st.action, f"{st.seconds:.0f}", st.detail[:80]] for st in result.roll.steps]
        if not result.roll.success:
            raise AnsibleError(
                "the rolling upgrade to the inventory did not complete; the canary is gone and the hosts "
                "that did not pass run the stable revision",
                [f"{st.name}: {st.action}: {st.detail}" for st in result.roll.steps if st.detail]
                + [f"run log: {result.run_dir}", "fix the host and run `installer upgrade -i INVENTORY`"],
            )
    out.weight, out.ended = None, "promoted"


def _behind_the_canary(
    s: Sides, both: plan.DeploymentPlan, out: Outcome, reporter: Reporter, drain_timeout_s: float
) -> None:
    deployment, model = s.stable.deployment, s.release.model
    target_inv = s.target_inv
    final = s.counted(plan.build(target_inv))  # the plan promote ends with: `both` is the way there
    target = revisions.next_revision(target_inv, s.canary.manifest(), Path(s.canary.bundle_root),
                                     s.canary.playbooks_dir, deployment_plan=final)
    hosts = list(target_inv.hosts)
    stable_names = _names(spec.engines_of(both, model, "stable"))
    with out.step(reporter, "drain stable", ", ".join(stable_names)) as row:
        # A promote run again after a failure below: the canary takes the model back first.
        stages.write(target_inv, split_of(s.release, s))
        drain.set_drained(target_inv, stable_names)
        waited = drain.wait_idle(target_inv, stable_names, drain_timeout_s)
        row[3] = f"{', '.join(stable_names)}: idle after {waited:.1f} s"
    with out.step(reporter, "configure stable", f"the canary's spec, revision {target.number}"):
        problems = gate.play_problems(rolling.run_site(both, target, hosts, out.log, "retire", reporter.task), hosts)
        if not problems:
            problems = release_gate.prove_stage(target_inv, spec.engines_of(both, model, "stable"), "stable",
                                                s.release.served_name, s.canary_spec().task,
                                                keys.ensure_probe_key(),
                                                drained_after=stable_names)
        if problems:
            raise AnsibleError(
                "the stable engines did not pass with the canary's spec; the canary keeps serving 100%, "
                "stable stays drained",
                [*(f"{h}: {p}" for h, p in problems.items()),
                 "fix the host and run `installer release promote` again, or `installer release abort`"],
            )
    with out.step(reporter, "stable takes over", f"{s.release.served_name}: 100% stable"):
        drain.set_drained(target_inv, [])
        stages.write(target_inv, {})
    canaries = _names(spec.engines_of(both, model, "canary"))
    with out.step(reporter, "retire canary", ", ".join(canaries)) as row:
        drain.set_drained(target_inv, canaries)
        waited = drain.wait_idle(target_inv, canaries, drain_timeout_s)
        pb = rolling.run_site(final, target, hosts, out.log, "retire-canary", reporter.task)
        problems = gate.play_problems(pb, hosts)
        if problems:
            raise AnsibleError("the canary engines could not be removed (stable serves everything)",
                               [*(f"{h}: {p}" for h, p in problems.items()),
                                "fix the host and run `installer release promote` again"])
        drain.set_drained(target_inv, [])
        row[3] = f"idle after {waited:.1f} s; units removed"
    revisions.record(deployment, target, {h.name: True for h in hosts}, out.log, command="release promote")
    state.clear(deployment)
    out.weight, out.ended = None, "promoted"


def _controller_step(s: Sides, out: Outcome, reporter: Reporter) -> Release:
    """The controller's verdict read first: a canary it rolled back (or an abort stopped) is not
    promoted; one it promoted is retired as it stands; one it runs takes the next step through
    it (its lease taken over, so it cannot step the same release meanwhile). Into 100% the
    release is marked promoted at once, so the controller cannot roll it back while stable is
    retired beneath it."""
    release, inv = s.release, s.stable_inv
    view = controller.show(inv)
    st = view.get("state") or {}
    if st.get("release") != release.controller:
        if (view.get("spec") or {}).get("id") != release.controller:
            raise ReleaseError(
                f"the release controller on {controller.host(inv).name} has no record of release "
                f"{release.controller} (was Redis emptied?)",
                [f"`installer release abort -i INVENTORY --model {release.model}` removes the canary"],
            )
        st = {"step": 0, "verdict": "running", "weight": release.steps[0]}  # pushed, not ticked yet
    if st.get("verdict") in ("rolled_back", "aborted"):
        last = st.get("last") or {}
        raise ReleaseError(
            f"the release controller {str(st['verdict']).replace('_', ' ')} the canary of {release.model}: "
            f"{'; '.join(last.get('reasons') or ['no reason recorded'])}",
            [f"`installer release abort -i INVENTORY --model {release.model}` removes the canary; start a new "
             "release once it is mended"],
        )
    with out.step(reporter, "next step", f"through the release controller on {controller.host(inv).name}") as row:
        if st.get("verdict") == "running":
            st = controller.step(inv, release.controller, int(st["step"]))
            if st.get("verdict") == "running" and st.get("weight") == 100:
                st = controller.step(inv, release.controller, int(st["step"]))
        release = replace(release, step=int(st["step"]), step_since=time.time())
        stages.write(inv, split_of(release, s))
        state.save(s.stable.deployment, release)
        row[3] = f"canary takes {release.weight}% of {release.served_name} (controller: {st.get('verdict')})"
    return release


def promote_release(
    s: Sides, out: Outcome, reporter: Reporter, drain_timeout_s: float, inventory_path: Path
) -> None:
    """The next step; at 100% (now or already), stable retired behind the canary."""
    release = s.release
    if release.controller:
        release = _controller_step(s, out, reporter)
    elif release.next_weight is not None:  # a release started before the controller ran releases
        release = release.advanced()
        with out.step(reporter, "next step", f"canary takes {release.weight}% of {release.served_name}"):
            stages.write(s.stable_inv, split_of(release, s))
            state.save(s.stable.deployment, release)
    out.weight = release.weight
    if release.weight == 100:
        retire_stable(spec.sides(s.stable.deployment, release), out, reporter, drain_timeout_s, inventory_path)
        if release.controller:
            controller.finish(s.stable_inv, release.controller)


def promote(inventory_path: Path, reporter: Reporter, *, model: str, drain_timeout_s: float = 120) -> Outcome:
    return entry.run("promote", inventory_path, model, lambda s, out: promote_release(
        s, out, reporter, drain_timeout_s, inventory_path))
