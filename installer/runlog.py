"""One folder per run under .installer/runs/: the Ansible artifacts, phase timings, the summary."""

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer.paths import state_dir


@dataclass
class RunLog:
    command: str
    deployment: str
    dir: Path = field(init=False)
    phases: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.started))
        base = state_dir() / "runs" / f"{stamp}-{self.command}-{self.deployment}"
        path, n = base, 1
        while path.exists():  # two runs in one second still get their own folder
            n += 1
            path = base.with_name(f"{base.name}-{n}")
        path.mkdir(parents=True)
        self.dir = path

    def log(self, line: str) -> None:
        with (self.dir / "installer.log").open("a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    def write_summary(self, summary: dict[str, Any]) -> Path:
        out = self.dir / "summary.json"
        data = {"command": self.command, "deployment": self.deployment, "phases_s": self.phases, **summary}
        out.write_text(json.dumps(data, indent=1, default=str) + "\n")
        return out
