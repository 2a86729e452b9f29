"""A host that does not come up is reported with its console, without touching the network."""

import os
import subprocess
from pathlib import Path

import pytest

from installer.base.errors import LabError
from installer.lab import hosts


def _console(tmp_path: Path) -> Path:
    log = tmp_path / "console.log"
    log.write_text("Spawning container lab1\n\x1b[0;1;31mFailed to mount /sys\x1b[0m\n")
    return log


def _access(tmp_path: Path) -> hosts.SSHAccess:
    return hosts.SSHAccess(tmp_path / "id_ed25519", tmp_path / "known_hosts")


def test_nspawn_that_exited_is_reported_with_the_console_tail(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(LabError, match="lab1: systemd-nspawn exited while booting") as err:
        hosts.wait_ready("lab1", "10.213.0.11", gone.pid, _access(tmp_path), _console(tmp_path))
    assert err.value.details[-1] == "console: Failed to mount /sys"


def test_timeout_is_reported_with_the_console_tail(tmp_path: Path) -> None:
    # timeout=0: the deadline has passed before the first SSH attempt, so nothing is sent.
    with pytest.raises(LabError, match=r"lab1 \(10.213.0.11\) was not up within 0s") as err:
        hosts.wait_ready(
            "lab1", "10.213.0.11", os.getpid(), _access(tmp_path), _console(tmp_path), timeout=0
        )
    assert "console: Spawning container lab1" in err.value.details


def test_stop_leaves_a_pid_that_is_not_our_nspawn_alone(tmp_path: Path) -> None:
    # Our own PID is alive but is not systemd-nspawn of that rootfs: never signalled.
    assert hosts.stop(os.getpid(), tmp_path / "rootfs", "10.213.0.11", None) == "not running"
    assert hosts.stop(None, tmp_path / "rootfs", "10.213.0.11", None) == "not running"


class _FakeHost:
    """Answers wait_ready's SSH commands like a booted host whose `unit` failed at boot."""

    def __init__(self, unit: str, fails_again: bool) -> None:
        self.unit, self.fails_again, self.restarted = unit, fails_again, False
        self.commands: list[str] = []

    def __call__(
        self, _key: Path, _known: Path, _address: str, command: str, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        failed = not self.restarted or self.fails_again
        if command.startswith("systemctl is-system-running"):
            out = "degraded\n" if failed else "running\n"
        elif command.startswith("systemctl --failed"):
            out = f"{self.unit} loaded failed failed Some unit\n" if failed else ""
        elif command.startswith("systemctl restart"):
            # Like systemd for a unit with RefuseManualStop=yes (systemd-tmpfiles-setup.service).
            return subprocess.CompletedProcess(command, 1, "", "Operation refused, unit may not be stopped.")
        elif command.startswith("systemctl reset-failed") and f"systemctl start {self.unit}" in command:
            self.restarted, out = True, ""
        else:
            out = "boot log line\n"
        return subprocess.CompletedProcess(command, 0, out, "")


@pytest.mark.parametrize("unit", ["systemd-logind.service", "systemd-tmpfiles-setup.service"])
def test_a_unit_that_failed_at_boot_is_started_once_more(
    unit: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI once failed because systemd-tmpfiles-setup (RefuseManualStop=yes) refused a `restart`.
    host = _FakeHost(unit, fails_again=False)
    monkeypatch.setattr(hosts, "ssh", host)
    assert hosts.wait_ready("lab1", "10.213.0.11", os.getpid(), _access(tmp_path), _console(tmp_path)) == "running"
    assert f"systemctl reset-failed {unit}; systemctl start {unit}" in host.commands


def test_a_unit_that_fails_again_stops_the_lab_and_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = _FakeHost("broken.service", fails_again=True)
    monkeypatch.setattr(hosts, "ssh", host)
    with pytest.raises(LabError, match=r"reports 'degraded'; failed: broken.service") as err:
        hosts.wait_ready("lab1", "10.213.0.11", os.getpid(), _access(tmp_path), _console(tmp_path))
    assert sum(c.startswith("systemctl reset-failed") for c in host.commands) == hosts.BOOT_RETRIES
    assert "failed unit: broken.service" in err.value.details
    assert "journal: boot log line" in err.value.details
