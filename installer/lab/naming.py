"""Names and addresses of a lab, derived from its name and subnet alone (pure logic).

Every kernel object a lab creates carries a name derived from the lab name, so `down` and
`leftovers` can find them even when the state file is gone. Interface names are limited to
15 characters by the kernel (IFNAMSIZ - 1), which is why lab names are at most 6 characters:
`plv-` + 6 + `-` + up to 4 digits = 15.
"""

import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, ip_network

from installer.base.errors import LabError

MAX_NAME_LEN = 6
# A leading letter keeps host names (`<name><n>`) from looking like numbers to resolvers.
_NAME_RE = re.compile(r"[a-z][a-z0-9]{0,5}")
# `model` is a sibling directory of the labs under state_dir()/lab/ (the shared tiny model).
RESERVED_NAMES = frozenset({"model"})

CONTROL_OFFSET = 1  # .1 is the control machine, on the bridge
FIRST_HOST_OFFSET = 11  # hosts from .11, leaving room for anything else a user adds by hand
MAX_PREFIX_LEN = 28  # a /28 still holds 4 hosts (.11 to .14)

_BRIDGE_PREFIX = "plb-"
_NETNS_PREFIX = "pli-"
_VETH_PREFIX = "plv-"


def validate_name(name: str) -> str:
    if name in RESERVED_NAMES or not _NAME_RE.fullmatch(name):
        raise LabError(
            f"invalid lab name {name!r}: use 1-{MAX_NAME_LEN} lowercase letters or digits, "
            f"starting with a letter (not {', '.join(sorted(RESERVED_NAMES))}), e.g. --name lab2"
        )
    return name


def parse_subnet(subnet: str) -> IPv4Network:
    try:
        net = ip_network(subnet, strict=True)
    except ValueError as exc:
        raise LabError(f"invalid lab subnet {subnet!r}: {exc} (use e.g. 10.213.0.0/24)") from exc
    if not isinstance(net, IPv4Network):
        raise LabError(f"lab subnet {subnet!r} is not IPv4: use e.g. 10.213.0.0/24")
    # The bridge puts this range on the control machine: only private ranges, so a typo can
    # never shadow a real outside network.
    if not net.is_private or net.is_loopback or net.is_link_local or net.is_multicast:
        raise LabError(f"lab subnet {subnet} is not a private range: use e.g. 10.213.0.0/24")
    if net.prefixlen > MAX_PREFIX_LEN or net.prefixlen < 8:
        raise LabError(f"lab subnet {subnet} must be between /8 and /{MAX_PREFIX_LEN}")
    return net


def max_hosts(net: IPv4Network) -> int:
    # Host addresses run from .11 up to, not including, the broadcast address.
    return min(net.num_addresses - 1 - FIRST_HOST_OFFSET, 9999)


def bridge_name(name: str) -> str:
    return f"{_BRIDGE_PREFIX}{name}"


def netns_name(name: str, index: int) -> str:
    return f"{_NETNS_PREFIX}{name}-{index}"


def veth_name(name: str, index: int) -> str:
    return f"{_VETH_PREFIX}{name}-{index}"


def host_name(name: str, index: int) -> str:
    return f"{name}{index}"


def netns_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(_NETNS_PREFIX + name)}-(\d+)")


def veth_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(_VETH_PREFIX + name)}-(\d+)")


def control_address(net: IPv4Network) -> IPv4Address:
    return net.network_address + CONTROL_OFFSET


def host_address(net: IPv4Network, index: int) -> IPv4Address:
    if index < 1 or index > max_hosts(net):
        raise LabError(f"host {index} does not fit in {net} (at most {max_hosts(net)} hosts)")
    return net.network_address + FIRST_HOST_OFFSET + index - 1


@dataclass(frozen=True)
class HostPlan:
    index: int
    name: str
    address: str
    netns: str
    veth: str


@dataclass(frozen=True)
class LabPlan:
    name: str
    subnet: IPv4Network
    control_address: str
    bridge: str
    hosts: tuple[HostPlan, ...]

    def cidr(self, address: str) -> str:
        return f"{address}/{self.subnet.prefixlen}"


def plan(name: str, subnet: str, hosts: int) -> LabPlan:
    """Every name and address of a lab of `hosts` hosts, or LabError saying what to change."""
    validate_name(name)
    net = parse_subnet(subnet)
    limit = max_hosts(net)
    if hosts < 1 or hosts > limit:
        raise LabError(f"--hosts must be between 1 and {limit} for subnet {net} (got {hosts})")
    return LabPlan(
        name=name,
        subnet=net,
        control_address=str(control_address(net)),
        bridge=bridge_name(name),
        hosts=tuple(
            HostPlan(
                index=i,
                name=host_name(name, i),
                address=str(host_address(net, i)),
                netns=netns_name(name, i),
                veth=veth_name(name, i),
            )
            for i in range(1, hosts + 1)
        ),
    )
