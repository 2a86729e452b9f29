"""The real CLI as a user runs it, and root commands on the shared lab's hosts, for the
end-to-end tests (their fixtures stay in tests/e2e/conftest.py)."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO

__all__ = ["REPO", "Run", "host_run", "host_ssh", "installer", "latest_summary"]


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    seconds: float
    summary: dict

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr


def installer(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run the real CLI, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "installer", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )


def host_ssh(lab_hosts, host, command: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """Run a command on a lab host as root over SSH (strict host keys)."""
    argv = [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={lab_hosts.known_hosts}", "-i", str(lab_hosts.private_key),
        f"root@{host.address}", command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def host_run(lab_hosts, host, command: str) -> str:  # type: ignore[no-untyped-def]
    """host_ssh's stdout, or fail."""
    proc = host_ssh(lab_hosts, host, command)
    assert proc.returncode == 0, f"{host.name}: {command}: {proc.stderr}"
    return proc.stdout


def latest_summary(state: Path, command: str) -> dict:
    runs = sorted((state / "runs").glob(f"*-{command}-*"), key=lambda p: p.stat().st_mtime)
    return json.loads((runs[-1] / "summary.json").read_text()) if runs else {}


def scrape_headers(state: Path, deployment: str) -> dict[str, str]:
    """Prometheus's token for the gateways' metrics, as `installer up` generated it."""
    token = (state / "metrics" / f"{deployment}.token").read_text().strip()
    return {"Authorization": f"Bearer {token}"}
