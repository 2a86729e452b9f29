"""Running external commands with errors that say what failed and why."""

import shlex
import subprocess
from collections.abc import Sequence

from installer.errors import CommandError


def run(
    argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run argv (never through a shell) and raise CommandError with its stderr on failure."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, input=input, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise CommandError(f"{argv[0]} is not installed: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"timed out after {timeout}s: {shlex.join(argv)}") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise CommandError(f"command failed (exit {proc.returncode}): {shlex.join(argv)}", tail)
    return proc
