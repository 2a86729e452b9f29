"""ansible/die_with_parent.py, the step between ansible-runner's fork and ansible-playbook: it
records the PID of the group the command runs in, ends as the command ends, and a command whose
installer is already gone never starts; one whose installer is SIGKILLed is stopped with every
process of its group (PR_SET_PDEATHSIG, then the whole group)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from installer.ansible.runner import die_with_parent_argv


def test_the_recorded_pid_leads_the_command_s_group_and_its_exit_is_the_command_s(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    argv = die_with_parent_argv(["sh", "-c", "ps -o pgid= -p $$; exit 3"], pidfile)
    # a new session, as ansible-runner's pexpect spawn makes
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, start_new_session=True)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == pidfile.read_text().strip()


def test_a_command_killed_by_a_signal_ends_it_by_that_signal(tmp_path: Path) -> None:
    argv = die_with_parent_argv(["sh", "-c", "kill -TERM $$"], tmp_path / "child.pid")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, start_new_session=True)
    assert proc.returncode == -signal.SIGTERM, proc.stderr


def test_a_command_killed_outright_ends_it_the_same_way(tmp_path: Path) -> None:
    argv = die_with_parent_argv(["sh", "-c", "kill -KILL $$"], tmp_path / "child.pid")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_command_whose_installer_is_already_gone_never_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = die_with_parent_argv(["touch", str(marker)], tmp_path / "child.pid")
    argv[argv.index(str(os.getpid()))] = "1"  # as if started by a parent that died since
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not marker.exists() and not (tmp_path / "child.pid").exists()


def test_a_sigkilled_parent_takes_the_command_and_its_children_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # the command and a child it leaves behind, each ignoring nothing; both write their PIDs
    command = ["sh", "-c", f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"]
    # a parent that starts the command the way ansible-runner does (pexpect: a pty, a new session,
    # SIGHUP ignored; the pty's hangup reaches the group before the kernel's SIGTERM), then waits
    parent_code = (
        "import pexpect; from pathlib import Path; "
        "from installer.ansible.runner import die_with_parent_argv; "
        f"argv = die_with_parent_argv({command!r}, Path({str(tmp_path / 'child.pid')!r})); "
        "pexpect.spawn(argv[0], argv[1:], ignore_sighup=True).expect(pexpect.EOF, timeout=None)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=Path(__file__).parents[3])
    started: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(started) < 2:
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
            started = [int(p) for p in pids.read_text().split()] if pids.is_file() else []
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in started):
            assert time.monotonic() < deadline, "the command's group outlived its SIGKILLed parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in started:  # ours: the PIDs our command wrote, still our sh or sleep
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """A running `sleep` or `sh` (not a zombie) at that PID."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return cmdline.startswith((b"sleep\0", b"sh\0")) and state != "Z"
