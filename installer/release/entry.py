"""How `installer release abort` and `promote` begin and end: the deployment's release lock, the
model's release read back from the state, one run log, and its summary written whatever happens."""

from collections.abc import Callable
from pathlib import Path

from installer.base.runlog import RunLog
from installer.inventory import load_inventory
from installer.release import lock, spec, state
from installer.release.outcome import Outcome
from installer.state import deployment_lock


def run(command: str, inventory_path: Path, model: str, body: Callable[[spec.Sides, Outcome], None]) -> Outcome:
    deployment = load_inventory(inventory_path).deployment
    with deployment_lock.held(deployment, f"release {command}"), lock.held(deployment, command):
        release = state.require(deployment, model)
        out = Outcome(command, model, RunLog(f"release-{command}", deployment))
        try:
            body(spec.sides(deployment, release), out)
        finally:
            out.log.write_summary(out.summary())
        return out
