"""`installer release watch`: every gateway's /metrics polled, a sliding window of the SLO's
length kept, and the decision rule (decide.py) run on each poll. Rollback aborts the release;
advance (auto_promote, a step held step_hold_s with healthy figures) promotes. Every decision,
with both stages' figures, is printed and written to the run log."""

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from installer.inventory import ReleaseSettings, load_inventory
from installer.prepare import Reporter
from installer.release import lock, metrics, scrape, spec, state
from installer.release.abort import abort_release
from installer.release.decide import Decision, decide, unready
from installer.release.lock import ReleaseBusy
from installer.release.outcome import Outcome
from installer.release.promote import promote_release
from installer.release.scrape import Scrape
from installer.release.state import Release
from installer.runlog import RunLog


def window_start(scrapes: "deque[Scrape]", now: float, window_s: float) -> Scrape:
    """The newest scrape at least `window_s` old (the oldest while the window fills); older ones
    are dropped."""
    while len(scrapes) > 1 and scrapes[1].at <= now - window_s:
        scrapes.popleft()
    return scrapes[0]


def judge(start: Scrape, end: Scrape, served_name: str, settings: ReleaseSettings, held_s: float) -> Decision:
    w = metrics.window(start.gateways, end.gateways)
    return decide(metrics.figures(w, served_name, "stable"), metrics.figures(w, served_name, "canary"),
                  settings.slo, held_s=held_s, auto_promote=settings.auto_promote,
                  step_hold_s=settings.step_hold_s)


def _act(inventory_path: Path, deployment: str, judged: Release, d: Decision, out: Outcome, reporter: Reporter,
         drain_timeout_s: float) -> str:
    """The decision carried out under the release lock, on the release it judged: "ended" (the
    release is over, or watch must stop), "acted" (a step promoted), "skipped" (another command is
    running, or changed the release meanwhile: the next poll judges a new window)."""
    model = judged.model
    try:
        with lock.held(deployment, "watch"):
            now = state.current(deployment)
            if now is None or now.model != model:
                out.log.log("the release ended before watch acted (another command finished it)")
                return "ended"
            if now != judged:
                text = (f"the release changed while its window was judged (canary at {judged.weight}%, now "
                        f"{now.weight}%): not acting on it")
                reporter.note(f"[yellow]{text}[/]")
                out.log.log(text)
                return "skipped"
            s = spec.sides(deployment, now)
            if d.action == "rollback":
                abort_release(s, out, reporter, drain_timeout_s, "rollback: " + "; ".join(d.reasons))
                return "ended"
            promote_release(s, out, reporter, drain_timeout_s, inventory_path)
            return "ended" if out.ended else "acted"
    except ReleaseBusy as exc:
        reporter.note(f"[yellow]not acting ({d.action}): {exc}[/]")
        out.log.log(f"not acting ({d.action}): {exc}")
        return "skipped"


def watch(
    inventory_path: Path,
    deployment: str,
    model: str,
    out: Outcome,
    reporter: Reporter,
    *,
    poll_s: float = 5,
    for_s: float | None = None,
    act: bool = True,
    drain_timeout_s: float = 120,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Until the release ends (rollback, or promoted through its last step), or `for_s` passed.
    `act=False` only reports what it would do."""
    began = clock()
    scrapes: deque[Scrape] = deque()
    step: tuple[float, int, int] | None = None
    while True:
        release = state.current(deployment)
        if release is None or release.model != model:
            out.log.log("the release ended (another command finished it)")
            return
        s = spec.sides(deployment, release)
        settings = s.canary_spec().release
        if (release.started, release.canary, release.step) != step:  # a new step is a new window
            scrapes.clear()
            step = (release.started, release.canary, release.step)
            canaries = s.canary_engines()
        now = clock()
        got = scrape.scrape(s.stable_inv, now)
        for host, problem in got.problems.items():
            reporter.note(f"[yellow]{host}: {problem}[/] (left out of the window)")
            out.log.log(f"scrape {host}: {problem}")
        scrapes.append(got)
        start = window_start(scrapes, now, settings.slo.window_s)
        if start is not got:
            d = judge(start, got, release.served_name, settings, now - release.step_since)
            # Only where the figures could give no verdict: a gateway of several workers reports
            # an engine unready when one worker's probes fail while the others still route to it.
            dead = unready([sc.any_ready(canaries) for sc in scrapes], got.at - start.at, settings.slo.window_s,
                           canaries)
            if dead and d.figures["canary"].requests < settings.slo.min_requests:
                d = Decision("rollback", [dead], d.figures)
            out.decisions.append(d)
            text = f"[{got.at - start.at:.0f} s window, canary at {release.weight}%] {d.describe()}"
            reporter.note(text)
            out.log.log(f"decision {text}")
            acting = act and d.action in ("rollback", "advance")
            if acting and _act(inventory_path, deployment, release, d, out, reporter, drain_timeout_s) == "ended":
                return
        if for_s is not None and clock() - began >= for_s:
            out.weight = release.weight
            return
        sleep(poll_s)


def run(
    inventory_path: Path, reporter: Reporter, *, model: str, poll_s: float = 5, for_s: float | None = None,
    act: bool = True, drain_timeout_s: float = 120,
) -> Outcome:
    deployment = load_inventory(inventory_path).deployment
    state.require(deployment, model)
    out = Outcome("watch", model, RunLog("release-watch", deployment))
    try:
        watch(inventory_path, deployment, model, out, reporter, poll_s=poll_s, for_s=for_s, act=act,
              drain_timeout_s=drain_timeout_s)
    finally:
        out.log.write_summary(out.summary())
    return out
