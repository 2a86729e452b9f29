"""`installer release abort`: the release controller stopped first (its lease taken over, the
canary at 0% in Redis: it cannot step the weights afterwards), the canary's weight to 0 at once
in the stages file, its engines drained until no gateway has a request on them, then every host
configured as the stable revision (the canary units stop and go, their weights folder with
them), that revision recorded again and the release taken out of Redis.

The stages file without the model is what sends every caller to stable (the gateways follow
Redis only for a release the file names), so a controller host that cannot be asked is noted
and the abort goes on: the rollback must not depend on it."""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from installer.base.errors import AnsibleError
from installer.day2 import drain, gate, rolling
from installer.planning import plan
from installer.preparation.prepare import Reporter
from installer.release import controller, entry, stages, state
from installer.release.outcome import Outcome
from installer.release.spec import Sides
from installer.release.state import ReleaseError
from installer.state import revisions


def abort_release(s: Sides, out: Outcome, reporter: Reporter, drain_timeout_s: float, why: str) -> None:
    deployment = s.stable.deployment
    inv = s.stable_inv
    canaries = s.canary_engines()
    out.log.log(f"abort of {s.release.model}: {why}")
    with out.step(reporter, "weight 0", why) as row:
        if s.release.controller:
            row[3] = f"{why}; {_stop_controller(s, out, reporter)}"
        stages.write(inv, {})  # the model absent: everything to stable
        state.save(deployment, replace(s.release, step=-1))
    with out.step(reporter, "drain canary", ", ".join(canaries)) as row:
        drain.set_drained(inv, canaries)  # the stage header cannot reach them either
        row[3] = f"{', '.join(canaries)}: idle after {drain.wait_idle(inv, canaries, drain_timeout_s):.1f} s"
    with out.step(reporter, "configure stable", f"revision {s.stable.number}"):
        pb = rolling.run_site(_stable_plan(s), s.stable, list(inv.hosts), out.log, "abort", reporter.task)
        problems = gate.play_problems(pb, list(inv.hosts))
        if problems:
            raise AnsibleError(
                f"the hosts could not be configured back to revision {s.stable.number}; the canary takes "
                "no traffic (weight 0, drained), the release stays recorded",
                [*(f"{h}: {p}" for h, p in problems.items()), "fix the host and run `installer release abort` again"],
            )
        drain.set_drained(inv, [])
    revisions.record(deployment, s.stable, {h.name: True for h in inv.hosts}, out.log, command="release abort")
    if s.release.controller:
        _quietly(out, reporter, "take the release out of Redis", lambda: controller.finish(inv, s.release.controller))
    state.clear(deployment)
    out.weight, out.ended = None, "aborted"


def _stable_plan(s: Sides) -> plan.DeploymentPlan:
    """The command's one plan: the stable revision's, its engines and gateway workers as that
    revision recorded them (what a rollback to it runs); a revision made before plans were kept
    takes the CPUs `release start` counted."""
    built = rolling.Planned.of(s.stable).plan
    return built if s.stable.plan_record() is not None else s.counted(built)


def _stop_controller(s: Sides, out: Outcome, reporter: Reporter) -> str:
    """What the controller said of the release it stopped, or why it could not be asked."""
    said: list[str] = []

    def stop() -> None:
        was = controller.stop(s.stable_inv, s.release.controller)
        said.append(f"controller: {was.get('verdict')} at {was.get('weight')}%")

    _quietly(out, reporter, "stop the release controller", stop)
    return said[0] if said else "controller not asked"


def _quietly(out: Outcome, reporter: Reporter, what: str, fn: Callable[[], None]) -> None:
    """fn, a failure noted: the stages file, not Redis, decides what abort's callers get."""
    try:
        fn()
    except ReleaseError as exc:
        reporter.note(f"[yellow]could not {what}: {exc}[/]")
        out.log.log(f"could not {what}: {exc}")


def abort(inventory_path: Path, reporter: Reporter, *, model: str, drain_timeout_s: float = 120) -> Outcome:
    return entry.run("abort", inventory_path, model, lambda s, out: abort_release(
        s, out, reporter, drain_timeout_s, "asked (installer release abort)"))
