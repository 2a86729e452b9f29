"""Prometheus's own checker, for the rules and configurations the monitoring role renders."""

import shutil
import subprocess
from pathlib import Path

import pytest


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is missing: `sudo bash .ci/setup` installs Debian's prometheus package")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
