"""Running external commands with errors that say what failed and why."""

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from installer.base.errors import CommandError


def run(
    argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv (never through a shell) and raise CommandError with its stderr on failure."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, input=input, timeout=timeout, check=False,
            env=None if env is None else dict(env),
        )
    except FileNotFoundError as exc:
        raise CommandError(f"{argv[0]} is not installed: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"timed out after {timeout}s: {shlex.join(argv)}") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise CommandError(f"command failed (exit {proc.returncode}): {shlex.join(argv)}", tail)
    return proc


class ChildGroup:
    """While a child process group runs (ansible-playbook, its own session leader): SIGTERM and
    SIGINT sent to the installer are passed on to that group, and once it is gone the installer
    stops too (KeyboardInterrupt for SIGINT, SystemExit(143) for SIGTERM), so a killed installer
    never leaves it running. The child records its PID in `pidfile` (ansible/die_with_parent.py).
    `cancel()` says when the caller should kill the group outright: the signal came before the
    PID was known, or the group outlived `grace_s` after it.

    Handlers can only be set in the main thread; elsewhere the signals keep their handlers (the
    child still dies with the installer through PR_SET_PDEATHSIG)."""

    def __init__(self, pidfile: Path, grace_s: float = 10.0) -> None:
        self.pidfile = pidfile
        self.grace_s = grace_s
        self.signum: int | None = None
        self._at = 0.0
        self._old: dict[int, Any] = {}

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def _forward(self, signum: int, _frame: object = None) -> None:
        if self.signum is None:
            self.signum, self._at = signum, time.monotonic()
        pid = self.pid()
        if pid is None:
            return
        try:
            # To the group's leader alone (a reused PID would lead no group): die_with_parent.py
            # passes it to the whole group, so each process gets it once, not twice.
            if os.getpgid(pid) == pid:
                os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def cancel(self) -> bool:
        return self.signum is not None and (self.pid() is None or time.monotonic() - self._at > self.grace_s)

    def __enter__(self) -> "ChildGroup":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._old[signum] = signal.signal(signum, self._forward)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        for signum, handler in self._old.items():
            signal.signal(signum, handler)
        self._old.clear()
        if self.signum is not None and exc_type is None:
            if self.signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + self.signum)
