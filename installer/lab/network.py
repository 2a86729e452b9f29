"""The lab network: one bridge on the control machine, one veth + network namespace per host.

`systemd-nspawn --network-veth` does not work on these machines (no systemd bus), so we make
the namespaces and veths ourselves and hand nspawn the namespace. Hosts get an address and
no default route, and we never touch ip_forward: the only thing they can reach is the bridge.
The bridge's interface alias records which lab directory owns it, so a second project that
picks the same lab name is told where the first one lives instead of tearing it down.
"""

import json
from ipaddress import IPv4Network, ip_network
from pathlib import Path
from typing import Any

from installer.base.procs import run
from installer.lab.naming import LabPlan, netns_pattern, veth_pattern

NETNS_DIR = Path("/run/netns")


def _ip(*args: str) -> str:
    return run(["ip", *args]).stdout


def parse_netns_list(text: str) -> list[str]:
    # `ip netns list` prints "NAME" or "NAME (id: N)" per line.
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def netns_names() -> list[str]:
    return parse_netns_list(_ip("netns", "list"))


def links() -> dict[str, dict[str, Any]]:
    return {link["ifname"]: link for link in json.loads(_ip("-j", "link", "show") or "[]")}


def lab_netns(name: str) -> list[str]:
    pattern = netns_pattern(name)
    return sorted(n for n in netns_names() if pattern.fullmatch(n))


def lab_links(name: str, bridge: str) -> list[str]:
    pattern = veth_pattern(name)
    return sorted(n for n in links() if n == bridge or pattern.fullmatch(n))


def bridge_owner(bridge: str) -> str | None:
    """The lab directory recorded on an existing bridge, "" if none, None if no such bridge."""
    link = links().get(bridge)
    return None if link is None else str(link.get("ifalias", ""))


def subnet_users(subnet: IPv4Network, bridge: str) -> list[str]:
    """Interfaces (other than our bridge) with an address or route overlapping `subnet`."""
    users = []
    for iface in json.loads(_ip("-j", "-4", "addr", "show") or "[]"):
        if iface["ifname"] == bridge:
            continue
        for addr in iface.get("addr_info", []):
            net = ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
            if net.overlaps(subnet):
                users.append(f"address {addr['local']}/{addr['prefixlen']} on {iface['ifname']}")
    for route in json.loads(_ip("-j", "-4", "route", "show") or "[]"):
        dst, dev = route.get("dst", "default"), route.get("dev", "?")
        if dst == "default" or dev == bridge:
            continue
        if ip_network(dst, strict=False).overlaps(subnet):
            users.append(f"route {dst} on {dev}")
    return users


def create_bridge(plan: LabPlan, owner: Path) -> None:
    _ip("link", "add", plan.bridge, "type", "bridge")
    _ip("link", "set", "dev", plan.bridge, "alias", str(owner))
    _ip("addr", "add", plan.cidr(plan.control_address), "dev", plan.bridge)
    _ip("link", "set", "dev", plan.bridge, "up")


def create_host_link(plan: LabPlan, netns: str, veth: str, address: str) -> None:
    """A namespace whose eth0 is the far end of a veth plugged into the bridge."""
    _ip("netns", "add", netns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    _ip("link", "set", "dev", veth, "master", plan.bridge, "up")
    _ip("-n", netns, "addr", "add", plan.cidr(address), "dev", "eth0")
    _ip("-n", netns, "link", "set", "dev", "lo", "up")
    _ip("-n", netns, "link", "set", "dev", "eth0", "up")


def delete_link(name: str) -> None:
    if name in links():
        _ip("link", "del", "dev", name)


def delete_netns(name: str) -> None:
    if (NETNS_DIR / name).exists():
        _ip("netns", "del", name)
