"""How we reach a host over SSH: the one argv builder, for the system ssh client (installer/hosts/remote.py,
the bundle push, the lab) and, through `checked_options`, for Ansible and Fabric.

Host keys are always checked: against the inventory's `known_hosts` file when it names one
(the lab writes one), else the user's own known_hosts. We never turn checking off.
"""

from dataclasses import dataclass
from pathlib import Path

from installer.inventory import Host, Inventory


def known_hosts_option(path: Path) -> str:
    """`UserKnownHostsFile=` for `-o`, quoted: ssh reads its value as a list of files split at
    spaces, so a path with a space would name files that do not exist and fail host key checks."""
    return f'UserKnownHostsFile="{path}"'


@dataclass(frozen=True)
class Target:
    name: str
    address: str
    user: str
    port: int
    private_key: Path | None
    known_hosts: Path | None

    def checked_options(self) -> list[str]:
        """What every client of ours sets: strict host keys, the deployment's known_hosts, and,
        where the inventory names a key, that identity only (else the ssh-agent's, as preflight's
        Fabric allows; Ansible adds its own key file option)."""
        opts = ["-o", "StrictHostKeyChecking=yes"]
        if self.private_key:
            opts += ["-o", "IdentitiesOnly=yes"]
        if self.known_hosts:
            opts += ["-o", known_hosts_option(self.known_hosts)]
        return opts

    def ssh_options(self, connect_timeout: int = 10, isolated: bool = False) -> list[str]:
        """`isolated` (the lab): no ~/.ssh/config (a ProxyJump or another identity must not
        reroute lab traffic), no global known_hosts, no warnings on stderr."""
        opts = ["-F", "none", "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"] if isolated else []
        opts += [
            "-o", "BatchMode=yes",
            *self.checked_options(),
            "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ServerAliveInterval=15",
        ]
        if self.private_key:
            opts += ["-i", str(self.private_key)]
        return opts

    def ssh_argv(self, command: str | None = None, *, connect_timeout: int = 10, isolated: bool = False) -> list[str]:
        # -l and `--`: neither the user nor the address can ever be read as an ssh option.
        argv = ["ssh", *self.ssh_options(connect_timeout, isolated), "-p", str(self.port), "-l", self.user,
                "--", self.address]
        return [*argv, command] if command else argv


def targets(inv: Inventory) -> list[Target]:
    return [target(inv, h) for h in inv.hosts]


def target(inv: Inventory, host: Host) -> Target:
    user, port, key = inv.host_ssh(host)
    return Target(host.name, host.address, user, port, key, inv.ssh.known_hosts)
