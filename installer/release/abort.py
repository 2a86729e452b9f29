"""`installer release abort`: the canary's weight to 0 at once, its engines drained until no
gateway has a request on them, then every host configured as the stable revision (the canary
units stop and go, their weights folder with them) and that revision recorded again."""

from dataclasses import replace
from pathlib import Path

from installer import plan, revisions
from installer.day2 import drain, gate, rolling
from installer.errors import AnsibleError
from installer.prepare import Reporter
from installer.release import entry, stages, state
from installer.release.outcome import Outcome
from installer.release.spec import Sides


def abort_release(s: Sides, out: Outcome, reporter: Reporter, drain_timeout_s: float, why: str) -> None:
    deployment = s.stable.deployment
    inv = s.stable_inv
    canaries = s.canary_engines()
    out.log.log(f"abort of {s.release.model}: {why}")
    with out.step(reporter, "weight 0", why):
        stages.write(inv, {})  # the model absent: everything to stable
        state.save(deployment, replace(s.release, step=-1))
    with out.step(reporter, "drain canary", ", ".join(canaries)) as row:
        drain.set_drained(inv, canaries)  # the stage header cannot reach them either
        row[3] = f"{', '.join(canaries)}: idle after {drain.wait_idle(inv, canaries, drain_timeout_s):.1f} s"
    with out.step(reporter, "configure stable", f"revision {s.stable.number}"):
        pb = rolling.run_site(plan.build(inv), s.stable, list(inv.hosts), out.log, "abort", reporter.task)
        problems = gate.play_problems(pb, list(inv.hosts))
        if problems:
            raise AnsibleError(
                f"the hosts could not be configured back to revision {s.stable.number}; the canary takes "
                "no traffic (weight 0, drained), the release stays recorded",
                [*(f"{h}: {p}" for h, p in problems.items()), "fix the host and run `installer release abort` again"],
            )
        drain.set_drained(inv, [])
    revisions.record(deployment, s.stable, {h.name: True for h in inv.hosts}, out.log, command="release abort")
    state.clear(deployment)
    out.weight, out.ended = None, "aborted"


def abort(inventory_path: Path, reporter: Reporter, *, model: str, drain_timeout_s: float = 120) -> Outcome:
    return entry.run("abort", inventory_path, model, lambda s, out: abort_release(
        s, out, reporter, drain_timeout_s, "asked (installer release abort)"))
