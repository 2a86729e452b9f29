"""ansible/die_with_parent.py, the step between ansible-runner's fork and ansible-playbook's
exec: it records the PID the command keeps, and a command whose installer is already gone, or
that outlives it, does not run on (PR_SET_PDEATHSIG)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from installer.ansible.runner import die_with_parent_argv


def test_the_command_keeps_the_recorded_pid(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    argv = die_with_parent_argv(["sh", "-c", "echo $$"], pidfile)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.strip() == pidfile.read_text().strip()


def test_a_command_whose_installer_is_already_gone_never_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = die_with_parent_argv(["touch", str(marker)], tmp_path / "child.pid")
    argv[argv.index(str(os.getpid()))] = "1"  # as if started by a parent that died since
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not marker.exists() and not (tmp_path / "child.pid").exists()


def test_a_sigkilled_parent_takes_the_command_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # a parent that starts the command the way the runner does, then waits on it
    parent_code = (
        "import subprocess, sys; from pathlib import Path; "
        "from installer.ansible.runner import die_with_parent_argv; "
        f"subprocess.run(die_with_parent_argv(['sleep', '300'], Path({str(pidfile)!r})))"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=Path(__file__).parents[3])
    child = 0
    try:
        deadline = time.monotonic() + 30
        while not pidfile.is_file():
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        child = int(pidfile.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(child):
            assert time.monotonic() < deadline, "the command outlived its SIGKILLed parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child and _alive(child):  # ours: the PID it recorded, still our sleep
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """A running `sleep` (not a zombie) at that PID."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return cmdline.startswith(b"sleep\0") and state != "Z"
