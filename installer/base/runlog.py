"""One folder per run under <state>/runs/: the Ansible artifacts, phase timings, the summary.

Run folders hold rendered inventories, host facts and task output: runs/ and every run folder
are 0700, and so is the state folder that holds them.
"""

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer.base.paths import private_dir, state_dir


@dataclass
class RunLog:
    command: str
    deployment: str
    dir: Path = field(init=False)
    phases: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.started))
        state = private_dir(state_dir())
        base = private_dir(state / "runs") / f"{stamp}-{self.command}-{self.deployment}"
        path, n = base, 1
        while True:  # two runs in one second still get their own folder
            try:
                path.mkdir(mode=0o700)
                break
            except FileExistsError:
                n += 1
                path = base.with_name(f"{base.name}-{n}")
        path.chmod(0o700)  # mkdir applies the umask to its mode: make it exactly 0700
        self.dir = path

    def log(self, line: str) -> None:
        with (self.dir / "installer.log").open("a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    def write_summary(self, summary: dict[str, Any]) -> Path:
        out = self.dir / "summary.json"
        data = {"command": self.command, "deployment": self.deployment, "phases_s": self.phases, **summary}
        out.write_text(json.dumps(data, indent=1, default=str) + "\n")
        return out


def summaries(command: str, deployment: str) -> Iterator[dict[str, Any]]:
    """The summary of every `command` run of `deployment`, newest first. A run that wrote none
    (stopped early) is passed over, and so is another deployment's whose folder name the glob also
    matches (`demo`'s finds `demo-2`'s): its summary names its own deployment."""
    runs = sorted((state_dir() / "runs").glob(f"*-{command}-{deployment}*"), key=lambda p: p.stat().st_mtime)
    for run in reversed(runs):
        try:
            summary = json.loads((run / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if summary.get("deployment") == deployment:
            yield summary
