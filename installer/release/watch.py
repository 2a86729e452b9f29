"""`installer release watch`: a view of the release controller's decisions (it decides on the
deployment, installer/release/controller.py). Each poll reads the controller's state and audit
trail from its host; every new decision is printed with its reasons and written to the run
log with its figures. Watch ends when the controller's verdict is in (promoted, rolled back or
aborted), saying which command finishes the release, or after `--for`. Stopping it changes
nothing: the release goes on without it."""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from installer.base.runlog import RunLog
from installer.inventory import load_inventory
from installer.preparation.prepare import Reporter
from installer.release import controller, spec, state
from installer.release.outcome import Outcome
from installer.release.state import Release, ReleaseError

NEXT = {
    "promoted": "`installer release promote` retires stable behind the canary",
    "rolled_back": "`installer release abort` removes the canary (it takes no traffic already)",
    "aborted": "`installer release abort` finishes removing the canary",
}


def describe(record: dict[str, Any]) -> str:
    """One decision as a line: its action, why and the weight it was taken at."""
    kind = f" ({record['kind']})" if record.get("kind") else ""
    reasons = "; ".join(record.get("reasons") or [])
    return f"canary at {record.get('weight')}%: {record.get('action')}{kind}{': ' + reasons if reasons else ''}"


def watch(
    release: Release,
    show: Callable[[], dict[str, Any]],
    out: Outcome,
    reporter: Reporter,
    *,
    poll_s: float = 5,
    for_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Until the controller's verdict on `release` is in, or `for_s` passed."""
    began, last_at = clock(), float("-inf")
    while True:
        view = show()
        for record in view.get("audit") or []:
            if record.get("release") == release.controller and record.get("at", 0) > last_at:
                last_at = record["at"]
                out.decisions.append(record)
                reporter.note(describe(record))
                out.log.log(f"decision {record}")
        st = view.get("state") or {}
        mine = st.get("release") == release.controller
        if mine:
            out.weight = st.get("weight")
        if mine and st.get("verdict") != "running":
            out.verdict = st["verdict"]
            reporter.note(f"the release controller's verdict: {out.verdict}; {NEXT.get(out.verdict, '')}")
            return
        if not mine and (view.get("spec") or {}).get("id") != release.controller:
            raise ReleaseError(f"the release controller has no record of release {release.controller}",
                               [f"`installer release abort --model {release.model}` removes the canary"])
        if for_s is not None and clock() - began >= for_s:
            return
        sleep(poll_s)


def run(inventory_path: Path, reporter: Reporter, *, model: str, poll_s: float = 5,
        for_s: float | None = None) -> Outcome:
    deployment = load_inventory(inventory_path).deployment
    release = state.require(deployment, model)
    if not release.controller:
        raise ReleaseError(f"the release of {model} was started before the release controller ran releases: "
                           "nothing decides it on the deployment",
                           ["`installer release promote` or `installer release abort` by hand"])
    inv = spec.sides(deployment, release).stable_inv
    out = Outcome("watch", model, RunLog("release-watch", deployment))
    try:
        watch(release, lambda: controller.show(inv), out, reporter, poll_s=poll_s, for_s=for_s)
    finally:
        out.log.write_summary(out.summary())
    return out
