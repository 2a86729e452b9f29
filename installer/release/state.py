"""The gray release under way, as state.json records it (installer/state/revisions.py keeps it beside the
revisions, so `up` and `upgrade` can refuse to run over it).

One release per deployment at a time. Its revisions: `stable` (what the hosts ran before, and
what abort returns to) and `canary` (recorded by start: the inventory the release moves to, with
the model beside stable). Promote past the last step records the inventory's own revision.
"""

import time
from dataclasses import asdict, dataclass, field, replace

from installer.base.errors import InstallerError
from installer.state import revisions


class ReleaseError(InstallerError):
    """A release command that does not fit the release under way (or its absence)."""


def shares(canary_weight: int) -> dict[str, int]:
    """Percent of a model's callers per stage: the canary's weight, stable the rest."""
    return {"stable": 100 - canary_weight, "canary": canary_weight}


@dataclass(frozen=True)
class Release:
    model: str  # the entry name of `models:` (`main` for a single `model:`)
    served_name: str
    stable: int  # revision numbers
    canary: int
    steps: tuple[int, ...]
    step: int = -1  # index into steps; -1: canary engines up, no traffic yet
    started: float = field(default_factory=time.time)
    step_since: float = field(default_factory=time.time)
    # the id the release controller knows it by (installer/release/controller.py); "" for a
    # release started before the controller ran releases
    controller: str = ""

    @property
    def weight(self) -> int:
        return 0 if self.step < 0 else self.steps[self.step]

    @property
    def shares(self) -> dict[str, int]:
        return shares(self.weight)

    @property
    def next_weight(self) -> int | None:
        """The weight promote moves to; None when the canary already takes everything."""
        return self.steps[self.step + 1] if self.step + 1 < len(self.steps) else None

    def advanced(self, now: float | None = None) -> "Release":
        if self.next_weight is None:
            raise ReleaseError(f"the canary of {self.model} already takes 100%: nothing to advance to")
        return replace(self, step=self.step + 1, step_since=time.time() if now is None else now)

    def to_record(self) -> dict[str, object]:
        return {**asdict(self), "steps": list(self.steps), "weight": self.weight}


def current(deployment: str) -> Release | None:
    record = revisions.release_in_progress(deployment)
    if record is None:
        return None
    record.pop("weight", None)
    return Release(**{**record, "steps": tuple(record["steps"])})


def save(deployment: str, release: Release) -> None:
    revisions.set_release(deployment, release.to_record())


def clear(deployment: str) -> None:
    revisions.set_release(deployment, None)


def require(deployment: str, model: str) -> Release:
    """The release of `model` under way, or an error saying what is."""
    release = current(deployment)
    if release is None:
        raise ReleaseError(
            f"no gray release is in progress on deployment {deployment}",
            [f"start one with `installer release start -i INVENTORY --model {model}`"],
        )
    if release.model != model:
        raise ReleaseError(
            f"the release in progress on deployment {deployment} is of model {release.model}, not {model}",
            [f"use `--model {release.model}`, or finish it first (`installer release promote|abort`)"],
        )
    return release


def refuse_second(deployment: str, model: str) -> None:
    """start: one release at a time (two would share the stages file and the revisions)."""
    release = current(deployment)
    if release is not None:
        raise ReleaseError(
            f"a gray release of model {release.model} is already in progress on deployment {deployment} "
            f"(canary at {release.weight}%)",
            [f"finish it first: `installer release promote -i INVENTORY --model {release.model}` or "
             f"`installer release abort -i INVENTORY --model {release.model}`"],
        )
