"""One release command at a time per deployment: start, promote, abort and watch's actions
change the same stages files, drain files and release record, and two at once judge or act on a
state the other is changing (a watch rolling back while a promote drains stable). An advisory
lock (flock) on a file in the state folder, held for the command; the holder writes who it is
there, so a second command fails at once naming it. The kernel drops the lock when the process
dies, so a killed command never leaves it behind."""

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from installer.base.paths import state_dir
from installer.release.state import ReleaseError


class ReleaseBusy(ReleaseError):
    """Another release command of the deployment is running."""


@contextmanager
def held(deployment: str, command: str) -> Iterator[None]:
    """The deployment's release lock for `command` (e.g. "promote"), or ReleaseBusy at once."""
    path = state_dir() / f"release-{deployment}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another release command"
            raise ReleaseBusy(
                f"{holder} is running on deployment {deployment}; `installer release {command}` was not started",
                ["wait until it finishes (a watch acts only between its polls), or stop it, then run this again"],
            ) from None
        try:
            f.truncate(0)
            f.write(f"`installer release {command}` (pid {os.getpid()}, since "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime())})\n")
            f.flush()
            yield
        finally:
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)
