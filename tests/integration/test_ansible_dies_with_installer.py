"""A killed installer takes its ansible-playbook with it: SIGTERM and SIGINT are passed on to
ansible-playbook's group (which passes them to its workers) and then stop the installer; a
SIGKILLed installer's ansible-playbook gets SIGTERM from the kernel (PR_SET_PDEATHSIG). Real
ansible-playbook through ansible-runner (installer/ansible/runner.py), local connection, a
playbook that waits; processes are found by this test's own inventory path in their command
line, never by name alone."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from installer.ansible.runner import PIDFILE
from tests.support import REPO
from tests.support.roles import local_project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Wait as a long task does
      ansible.builtin.pause:
        seconds: 300
"""


def _ours(marker: str, besides: int) -> dict[int, str]:
    """Live processes (not zombies) whose command line names `marker`, except `besides`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == besides:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found[int(entry.name)] = cmdline
    return found


def _wait(what: str, done, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("sig", "parent_exit"),
    [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, -signal.SIGINT), (signal.SIGKILL, -signal.SIGKILL)],
    ids=["SIGTERM", "SIGINT", "SIGKILL"],
)
def test_ansible_playbook_is_gone_within_seconds_of_the_installer(
    tmp_path: Path, sig: signal.Signals, parent_exit: int
) -> None:
    playbooks, inventory = local_project(tmp_path, WAIT, "wait.yml")
    run_dir = tmp_path / "run"
    marker = str(inventory)
    env = {**os.environ, "INSTALLER_STATE_DIR": str(tmp_path / "state")}
    parent = subprocess.Popen(
        [sys.executable, "-m", "tests.support.ansible_parent", str(playbooks), marker, str(run_dir), "wait.yml"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        # ansible-playbook recorded, and a worker of it (a second process) running the pause
        _wait("ansible-playbook did not start its task", lambda: (run_dir / PIDFILE).is_file()
              and len(_ours(marker, parent.pid)) >= 2, 60)
        pid = int((run_dir / PIDFILE).read_text())
        assert "ansible-playbook" in _ours(marker, parent.pid)[pid]
        parent.send_signal(sig)
        deadline = time.monotonic() + 15
        while _ours(marker, parent.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _ours(marker, parent.pid)
        assert not left, f"still running after the installer got {sig.name}: {left}"
        assert parent.wait(15) == parent_exit, parent.stdout.read().decode() if parent.stdout else ""
    finally:
        for leftover in _ours(marker, parent.pid):  # ours alone: this test's inventory path
            os.kill(leftover, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
        parent.wait()
