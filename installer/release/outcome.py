"""What a release command did, step by step, for the summary table and summary.json."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer.base.runlog import RunLog
from installer.preparation.prepare import Reporter, timed


@dataclass
class Outcome:
    command: str
    model: str
    log: RunLog
    rows: list[list[str]] = field(default_factory=list)  # step, result, seconds, detail
    weight: int | None = None  # the canary's share at the end; None: no release any more
    ended: str = ""  # "promoted" | "aborted" when the release ended
    verdict: str = ""  # watch: the release controller's verdict once it is in
    decisions: list[dict[str, Any]] = field(default_factory=list)  # watch: the controller's, as its audit has them

    @property
    def run_dir(self) -> Path:
        return self.log.dir

    @contextmanager
    def step(self, reporter: Reporter, name: str, detail: str = "") -> Iterator[list[str]]:
        """A phase on screen and in the run log, and a row: `done` unless it raised."""
        start = time.monotonic()
        row = [name, "failed", "", detail]
        self.rows.append(row)
        with timed(self.log, reporter, name):
            yield row
            row[1] = "done"
        row[2] = f"{time.monotonic() - start:.1f}"

    def summary(self) -> dict[str, object]:
        return {
            "model": self.model, "weight": self.weight, "ended": self.ended, "verdict": self.verdict,
            "steps": [dict(zip(("step", "result", "seconds", "detail"), r, strict=True)) for r in self.rows],
            "decisions": self.decisions,
        }
