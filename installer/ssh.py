"""How we reach a host over SSH, one definition for Fabric, the system ssh client and Ansible.

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

    def ssh_options(self) -> list[str]:
        opts = [
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=10",
            "-o", "ServerAliveInterval=15",
        ]
        if self.known_hosts:
            opts += ["-o", known_hosts_option(self.known_hosts)]
        if self.private_key:
            opts += ["-o", "IdentitiesOnly=yes", "-i", str(self.private_key)]
        return opts

    def ssh_argv(self, command: str | None = None) -> list[str]:
        # -l and `--`: neither the user nor the address can ever be read as an ssh option.
        argv = ["ssh", *self.ssh_options(), "-p", str(self.port), "-l", self.user, "--", self.address]
        return [*argv, command] if command else argv


def targets(inv: Inventory) -> list[Target]:
    return [target(inv, h) for h in inv.hosts]


def target(inv: Inventory, host: Host) -> Target:
    user, port, key = inv.host_ssh(host)
    return Target(host.name, host.address, user, port, key, inv.ssh.known_hosts)
