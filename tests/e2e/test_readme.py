"""The README's quick start, run verbatim against the shared lab: what a new user copies works.

Two things are substituted, both of which the README cannot know: the API key that `keys create`
prints, and the lab's address (the tests' lab has its own subnet so that a user's lab from the
README keeps running beside it). Everything else runs as written, in a root shell with no sudo,
from a folder laid out like the checkout the README assumes (`.venv/`, `inventory/lab.yml`).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.e2e import REPO, Run, installer
from tests.support.readme import bash_blocks, commands

pytestmark = pytest.mark.e2e
README_ADDRESS = "10.213.0.11"  # lab1 of `installer lab up --hosts 2` on its default subnet
KEY_NAME = "me"


def _sh(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # No PATH entry for sudo on purpose: a root shell on a fresh machine has none.
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_quick_start_runs_verbatim(deployed: Run, lab_hosts, e2e_state: Path, tmp_path: Path) -> None:
    block = next(b for b in bash_blocks() if "keys create" in b and "installer bench" in b)
    lines = commands(block)
    assert any(README_ADDRESS in line for line in lines), "the README's lab address moved: update README_ADDRESS"
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "lab.yml").symlink_to(lab_hosts.inventory_path)
    env = {**os.environ, "INSTALLER_STATE_DIR": str(e2e_state), "COLUMNS": "200"}
    # A developer's state folder outlives a run: a key from the last one would make `create` refuse.
    installer("keys", "revoke", KEY_NAME)

    secret = ""
    for line in lines:
        line = line.replace(README_ADDRESS, lab_hosts.hosts[0].address)
        if secret:
            line = line.replace("sk-pli-...", secret)
        proc = _sh(line, tmp_path, env)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if "keys create" in line:
            found = re.search(r"^(sk-pli-\S+)$", proc.stdout, re.MULTILINE)
            assert found, f"keys create printed no key:\n{proc.stdout}"
            secret = found.group(1)
        if "installer bench" in line:
            assert re.search(r"\b8 completed, 0 failed\b", proc.stdout), proc.stdout[-2000:]
    assert secret and "BEGIN CERTIFICATE" in (tmp_path / "lab-ca.pem").read_text()
