"""The lab's host keys and its root SSH, so every connection checks host keys strictly.

One ed25519 key pair per lab (installer/hosts/sshkeys.py) logs in as root on every host. Each host
gets fresh host keys (the copied rootfs would otherwise give every host the same ones), and
their public halves go into the lab's own known_hosts file: nothing ever needs
StrictHostKeyChecking=no.
"""

import subprocess
from pathlib import Path

from installer.base.procs import run
from installer.hosts.ssh import Target


def regenerate_host_keys(rootfs: Path) -> list[str]:
    """Replace the host keys in `rootfs` with new ones; return their public keys."""
    etc_ssh = rootfs / "etc" / "ssh"
    for old in etc_ssh.glob("ssh_host_*"):
        old.unlink()
    # -A with -f PREFIX writes every default key type under PREFIX/etc/ssh/.
    run(["ssh-keygen", "-A", "-f", str(rootfs)])
    return [p.read_text().strip() for p in sorted(etc_ssh.glob("ssh_host_*_key.pub"))]


def ssh_argv(
    key: Path, known_hosts: Path, address: str, command: str, *, connect_timeout: int = 3
) -> list[str]:
    """installer/hosts/ssh.py's argv, isolated from the user's ssh configuration: root on a lab host."""
    return Target(address, address, "root", 22, key, known_hosts).ssh_argv(
        command, connect_timeout=connect_timeout, isolated=True)


def ssh(
    key: Path, known_hosts: Path, address: str, command: str, *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run `command` on a lab host; exit status 255 means SSH itself failed."""
    argv = ssh_argv(
        key, known_hosts, address, command, connect_timeout=max(1, min(5, int(timeout)))
    )
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 255, "", f"timed out after {timeout:.0f}s")
