"""The hosts: `hosts:` entries, the `ssh:` settings they share, and the OS releases they run
(`os:`)."""

import re
from ipaddress import ip_address
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from installer.inventory import targets as os_targets
from installer.inventory.fields import LocalPath, Name, Port, Strict, matching

# POSIX portable user names (no leading '-', which ssh and sudo would read as an option).
User = Annotated[str, matching(
    r"[A-Za-z_][A-Za-z0-9_.-]{0,31}",
    "a user name: up to 32 letters, digits, '_', '.' or '-', starting with a letter or '_' (e.g. ubuntu)",
)]


class SSHSettings(Strict):
    user: User = "root"
    port: Port = 22
    private_key: LocalPath | None = None
    known_hosts: LocalPath | None = None


class HostSSH(Strict):
    """Per-host overrides of the inventory-wide `ssh` settings."""

    user: User | None = None
    port: Port | None = None
    private_key: LocalPath | None = None


# One DNS label: ASCII letters, digits and '-', not at either end (so never an ssh option).
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def host_address(value: str) -> str:
    """An IP address (normalised) or a DNS name; ValueError saying which rule it breaks."""
    if "%" not in value:  # an IPv6 zone (fe80::1%eth0) is an interface of this machine, not a host
        try:
            return str(ip_address(value))
        except ValueError:
            pass
    labels = value.removesuffix(".").split(".")
    if all(_DNS_LABEL.fullmatch(x) for x in labels) and len(value) <= 253:
        if not labels[-1].isdigit():
            return value
        # all digits at the end: a mistyped IPv4 address (192.0.2.300), never a DNS name
        raise ValueError(f"{value!r} is not a valid IP address; each of its 4 numbers is 0-255")
    raise ValueError(
        f"{value!r} is neither an IP address nor a DNS name; a DNS name is ASCII letters, "
        "digits, '-' and '.', each part starting and ending with a letter or digit"
    )


def _target_name(value: str) -> str:
    if value not in os_targets.TARGETS:
        raise ValueError(f"unknown target {value!r}; use one of {', '.join(os_targets.NAMES)}")
    return value


# An OS release the bundle is built for (installer/inventory/targets.py): debian-12, ubuntu-24.04, ...
TargetName = Annotated[str, AfterValidator(_target_name)]


class Host(Strict):
    name: Name
    address: str
    groups: list[Name] = Field(default_factory=lambda: ["serving"])
    ssh: HostSSH = HostSSH()
    # This host's OS release; None: the deployment's `os.target`.
    target: TargetName | None = None

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return host_address(value)


class OSSettings(Strict):
    """The hosts' OS releases (bundle targets) and where their OS packages come from."""

    # Every host's target unless the host names its own.
    target: TargetName = os_targets.DEFAULT
    # target: a folder of .debs on this machine for that release (with their dependencies a
    # minimal system lacks), used instead of the archive; needed for Ubuntu targets whose hosts
    # install OS packages (this build machine reaches only Debian's archive).
    packages_dirs: dict[TargetName, LocalPath] = Field(default_factory=dict)


def duplicate_hosts(hosts: list[Host]) -> list[tuple[str, str, int, int]]:
    """(attribute, value, first index, duplicate index) for every repeated host name or address."""
    found = []
    for attr in ("name", "address"):
        seen: dict[str, int] = {}
        for i, host in enumerate(hosts):
            value = getattr(host, attr)
            if value in seen:
                found.append((attr, value, seen[value], i))
            seen.setdefault(value, i)
    return found
