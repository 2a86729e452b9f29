"""Booting, probing and stopping one lab host (a systemd-nspawn container, systemd as PID 1)."""

import logging
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from installer.base.errors import LabError
from installer.lab import processes
from installer.lab.sshkeys import ssh

log = logging.getLogger(__name__)

# A loaded 2-core CI machine booting several hosts at once needs far more than the usual ~10 s.
BOOT_TIMEOUT = 180.0
# Generous: a host running vLLM needs a while to stop its engine cleanly.
POWEROFF_TIMEOUT = 60.0
TERM_TIMEOUT = 20.0
# How often a unit that failed at boot is started again before the lab gives up on the host.
BOOT_RETRIES = 3
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
_NO_CONNECTION = (
    "Connection refused", "Connection timed out", "timed out", "No route to host",
    "Permission denied", "Host key verification failed", "Network is unreachable",
)  # fmt: skip


@dataclass(frozen=True)
class SSHAccess:
    key: Path
    known_hosts: Path


def nspawn_argv(rootfs: Path, machine: str, netns: str) -> list[str]:
    # --register=no --keep-unit: there is no system bus on the control machine to register with.
    # --link-journal=no: keep host journals out of the control machine's /var/log/journal.
    # CAP_NET_ADMIN: a server's root may add addresses, and keepalived must, to hold a frontend's
    # VIP (#37; without it "Netlink: Operation not permitted" and no host ever holds the VIP).
    # nspawn keeps it for --private-network only, not for a network namespace given by path; it
    # reaches no further than the host's own namespace (its veth on the lab's bridge).
    return [
        "systemd-nspawn", "-b", "-D", str(rootfs), f"--machine={machine}",
        "--register=no", "--keep-unit", f"--network-namespace-path=/run/netns/{netns}",
        "--capability=CAP_NET_ADMIN", "--link-journal=no", "--console=read-only",
    ]  # fmt: skip


def boot(rootfs: Path, machine: str, netns: str, console_log: Path) -> int:
    """Start the container in the background and return the systemd-nspawn PID."""
    with console_log.open("w") as log:
        # A new session: Ctrl-C on `installer lab up` must not kill the hosts it already booted.
        proc = subprocess.Popen(
            nspawn_argv(rootfs, machine, netns),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc.pid


def console_tail(console_log: Path, lines: int = 15) -> list[str]:
    try:
        text = console_log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    clean = [_ANSI.sub("", line) for line in text.splitlines()]
    return [f"console: {line}" for line in clean if line.strip()][-lines:]


def wait_ready(
    name: str,
    address: str,
    pid: int,
    access: SSHAccess,
    console_log: Path,
    timeout: float = BOOT_TIMEOUT,
) -> str:
    """Wait until SSH answers and systemd reports `running`; LabError with the console if not."""
    deadline = time.monotonic() + timeout
    last_error = "no answer yet"
    starts_left = BOOT_RETRIES
    while True:
        if not processes.is_running(pid):
            raise LabError(
                f"{name}: systemd-nspawn exited while booting", console_tail(console_log)
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LabError(
                f"{name} ({address}) was not up within {timeout:.0f}s (ssh: {last_error})",
                console_tail(console_log),
            )
        result = ssh(
            access.key,
            access.known_hosts,
            address,
            "systemctl is-system-running --wait",
            timeout=remaining,
        )
        if result.returncode != 255:
            state = result.stdout.strip()
            if state == "running":
                return state
            failed = _failed_units(access, address)
            # A unit of the base system that failed while the shared machine was overloaded (seen
            # in CI: a unit timed out; systemd-tmpfiles-setup exited 219/CGROUP) is started again;
            # one that keeps failing is a real problem and stops the lab. `start`, not `restart`:
            # units with RefuseManualStop=yes (systemd-tmpfiles-setup is one) refuse a restart,
            # and `start` re-runs a failed unit just the same.
            if failed and starts_left:
                starts_left -= 1
                log.warning("%s: starting again unit(s) that failed at boot: %s", name, ", ".join(failed))
                units = " ".join(failed)
                again = ssh(access.key, access.known_hosts, address,
                            f"systemctl reset-failed {units}; systemctl start {units}",
                            timeout=max(10.0, remaining))
                if again.returncode != 0:
                    log.warning("%s: starting %s again failed: %s", name, units, again.stderr.strip())
                    time.sleep(2)
                continue
            journal = ssh(access.key, access.known_hosts, address,
                          "journalctl -b --no-pager -n 30 " + " ".join(f"-u {u}" for u in failed),
                          timeout=10).stdout if failed else ""
            raise LabError(
                f"{name} ({address}) booted but systemd reports {state or 'nothing'!r}"
                + (f"; failed: {', '.join(failed)}" if failed else ""),
                [f"failed unit: {u}" for u in failed]
                + [f"journal: {line}" for line in journal.splitlines()[-30:]]
                + console_tail(console_log),
            )
        last_error = (
            result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no answer"
        )
        time.sleep(0.5)


def _failed_units(access: SSHAccess, address: str) -> list[str]:
    out = ssh(access.key, access.known_hosts, address, "systemctl --failed --no-legend --plain", timeout=10).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def probe(address: str, access: SSHAccess, timeout: float = 8) -> tuple[bool, str]:
    """(SSH works, `systemctl is-system-running` output) for a running host."""
    result = ssh(
        access.key, access.known_hosts, address, "systemctl is-system-running", timeout=timeout
    )
    if result.returncode == 255:
        return False, ""
    return True, result.stdout.strip()


def stop(pid: int | None, rootfs: Path, address: str, access: SSHAccess | None) -> str:
    """Shut a host down cleanly and wait for its nspawn to exit; signals only as a fallback.

    The caller deletes the host's namespace only after this returns: deleting it first left
    services (vLLM) hanging in their stop job until systemd's 90 s timeout.
    """
    if pid is None or not processes.is_nspawn_of(pid, rootfs):
        return "not running"
    if access and access.key.exists() and access.known_hosts.exists():
        result = ssh(access.key, access.known_hosts, address, "systemctl poweroff", timeout=15)
        # The connection may drop as the host goes down (exit 255 too); only a failure to
        # connect at all means the poweroff never reached it.
        reached = result.returncode != 255 or not any(m in result.stderr for m in _NO_CONNECTION)
        if reached and processes.wait_exit(pid, POWEROFF_TIMEOUT):
            return "powered off"
    return processes.terminate(pid, rootfs, term_timeout=TERM_TIMEOUT)
