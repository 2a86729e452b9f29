"""Where a lab keeps its files, and `lab.json`: what was created, so `down` can undo it.

The state file is written before anything is created and updated as hosts boot, so a lab
that `up` left half-made (Ctrl-C, a failed boot) can still be taken down.
"""

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from installer.base.errors import LabError
from installer.base.paths import state_dir

STATE_VERSION = 1


def labs_root() -> Path:
    return state_dir() / "lab"


def lab_dir(name: str) -> Path:
    return labs_root() / name


def hosts_dir(name: str) -> Path:
    return lab_dir(name) / "hosts"


def ssh_dir(name: str) -> Path:
    return lab_dir(name) / "ssh"


def state_path(name: str) -> Path:
    return lab_dir(name) / "lab.json"


def model_dir() -> Path:
    # Shared by every lab of this project: the model does not depend on the lab.
    return labs_root() / "model" / "tiny-llama"


@dataclass
class HostRecord:
    name: str
    address: str
    netns: str
    veth: str
    rootfs: str
    console_log: str
    pid: int | None = None
    # Its OS release (installer/lab/rootfs.py RELEASES); state files from before releases: 12.
    release: str = "debian-12"


@dataclass
class LabState:
    name: str
    subnet: str
    control_address: str
    bridge: str
    hosts: list[HostRecord] = field(default_factory=list)
    version: int = STATE_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "LabState":
        data = json.loads(text)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported lab state version {data.get('version')!r}")
        hosts = [HostRecord(**h) for h in data.pop("hosts", [])]
        return cls(**data, hosts=hosts)


def load(name: str) -> LabState | None:
    path = state_path(name)
    try:
        return LabState.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise LabError(
            f"cannot read lab state {path}: {exc}",
            ["`installer lab down` still removes what it can find by name"],
        ) from exc


def save(state: LabState) -> None:
    path = state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(state.to_json())
    # Rename so a crash never leaves a truncated state file behind.
    os.replace(tmp, path)


def remove(name: str) -> None:
    state_path(name).unlink(missing_ok=True)


@contextmanager
def locked(name: str) -> Iterator[None]:
    """Hold the lab's lock: two `up`/`down` runs on one lab at once would trip over each other."""
    path = lab_dir(name) / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LabError(
                f"another `installer lab` command is working on lab {name!r}; wait for it to end"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
