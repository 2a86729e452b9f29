"""One command at a time that changes a deployment, and no change while its state is exported.

`up`, `upgrade`, `rollback`, `down` and the release commands each read the deployment's state
(revisions, keys, the CA, release records), change hosts and write the state back: two at once
would configure hosts from two revisions and one would overwrite the other's record. `state
export` and `state import` copy or replace the whole state folder, so an archive taken while a
command writes would hold half of its change.

Advisory locks (flock) in the state folder, taken without waiting: a deployment command holds
`commands.lock` and `keys.lock` shared and `deployment-<name>.lock` exclusively; `keys create`,
`revoke` and `quota` hold `keys.lock` exclusively (the key store is every deployment's); export
and import hold `commands.lock` exclusively. The holder writes who it is into its file, so the refusal names it.
The kernel drops a lock when its process dies: a killed command never leaves one behind. A
command that runs another in the same process (a release start runs `up`'s configure) holds its
locks once.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import IO

from installer.base.errors import InstallerError
from installer.base.paths import resolve_state_dir, state_dir

COMMANDS = "commands.lock"
KEYS = "keys.lock"  # the key store, which every deployment's `up` renders for its gateways
# (lock file, mode) -> depth, in this process: re-entry only into the same lock of the same state
# folder in the same mode (a shared holder asking for the exclusive lock is refused, not waved on)
_held: dict[tuple[str, int], int] = {}


class DeploymentBusy(InstallerError):
    """Another installer command is changing the deployment, or its state is being exported."""


def _who(command: str) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    return f"`installer {command}` (pid {os.getpid()}, since {since})"


@contextmanager
def _flock(name: str, mode: int, command: str, refusal: str, fix: str) -> Iterator[None]:
    path = state_dir() / name
    key = (str(path), mode)
    if _held.get(key):
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    f: IO[str]
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or _holders(path.parent) or "another installer command"
            raise DeploymentBusy(f"{holder} is running; {refusal}", [fix]) from None
        _held[key] = 1
        try:
            if mode == fcntl.LOCK_EX:
                f.truncate(0)
                f.write(_who(command) + "\n")
                f.flush()
            yield
        finally:
            _held.pop(key, None)
            if mode == fcntl.LOCK_EX:
                f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _all(command: str, refused: str, locks: list[tuple[str, int, str]]) -> Iterator[None]:
    """`commands.lock` shared (no export or import under way), then each (file, mode, fix)."""
    with ExitStack() as stack:
        stack.enter_context(_flock(
            COMMANDS, fcntl.LOCK_SH, command, refused,
            "wait until the state export or import finishes, then run this again"))
        for name, mode, fix in locks:
            stack.enter_context(_flock(name, mode, command, refused, fix))
        yield


def held(deployment: str, command: str) -> AbstractContextManager[None]:
    """Deployment `deployment` for `command` (e.g. "up"), or DeploymentBusy at once."""
    return _all(command, f"`installer {command}` was not started and nothing was changed", [
        (KEYS, fcntl.LOCK_SH, "wait until the `installer keys` command finishes, then run this again"),
        (f"deployment-{deployment}.lock", fcntl.LOCK_EX,
         f"wait until it finishes (or stop it: a killed command leaves no lock), then run `installer {command}` again"),
    ])


def key_store(command: str) -> AbstractContextManager[None]:
    """The key store for `command` (e.g. "keys revoke"): an `up` renders it for its gateways and
    pushes it minutes later, so a key revoked in between would come back with no word."""
    return _all(command, f"`installer {command}` was not started and no key was changed", [
        (KEYS, fcntl.LOCK_EX, f"wait until it finishes, then run `installer {command}` again"),
    ])


@contextmanager
def whole_state(command: str) -> Iterator[None]:
    """Every deployment of the state folder, for `state export`/`state import`. An empty or missing
    state folder has no command to wait for, and gets no lock file: import takes only an empty one."""
    folder, _why = resolve_state_dir()
    if not folder.is_dir() or not any(folder.iterdir()):
        yield
        return
    with _flock(COMMANDS, fcntl.LOCK_EX, command,
                f"`installer {command}` was not started: it would copy a state that command is changing",
                "wait until it finishes, then run this again"):
        yield


def _holders(folder: Path) -> str:
    """Who holds the deployments' locks (a shared lock's holders write nothing of their own)."""
    found = []
    for p in sorted(folder.glob("deployment-*.lock")):
        try:
            found += [line for line in p.read_text().splitlines() if line.strip()]
        except OSError:
            continue
    return ", ".join(found)
