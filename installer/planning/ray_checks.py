"""A model spanning hosts, checked against the inventory before any host is touched.

Ray's ports (installer/gpu/ray_ports.py) are fixed; the deployment's own (engines, gateway,
Redis, Prometheus) come from the inventory. A Ray node that finds one of its ports taken by the
gateway or Redis fails to start, or worse takes the port first and the gateway fails, so the
two are refused together at validation (`installer validate`, `up`'s plan), naming the setting's
file:line and a free place for it. The Ray hosts' addresses must be IP addresses: Ray's
`--node-ip-address` and the firewall keeping Ray's ports to the group (installer/gpu/ray_firewall.py)
both name them.
"""

from __future__ import annotations

from ipaddress import ip_address

from installer.base.errors import InventoryError
from installer.gpu import ray_ports
from installer.gpu.tuner import Tuned
from installer.inventory import Inventory


def _deployment_ports(inv: Inventory, tuned: Tuned) -> list[tuple[int, str, tuple[str, ...]]]:
    """(port, what, inventory key) of every port the deployment listens on beside Ray's."""
    first = tuned.engines[0].host if tuned.engines else ""
    count = sum(1 for e in tuned.engines if e.host == first) or 1
    found: list[tuple[int, str, tuple[str, ...]]] = [
        (inv.ports.engine + i, f"engine port {inv.ports.engine + i}" if i else "ports.engine", ("ports", "engine"))
        for i in range(count)
    ]
    found += [
        (inv.ports.gateway, "ports.gateway", ("ports", "gateway")),
        (inv.ports.redis, "ports.redis", ("ports", "redis")),
        (inv.monitoring.prometheus_port, "monitoring.prometheus_port", ("monitoring", "prometheus_port")),
    ]
    return found


def port_problems(inv: Inventory, tuned: Tuned | None) -> list[str]:
    """One line per deployment port inside Ray's, with its file:line and the fix; [] without Ray."""
    if tuned is None or tuned.ray is None:
        return []
    problems = []
    for port, what, key in _deployment_ports(inv, tuned):
        ray = ray_ports.port_of(port, "head")
        if ray is None:
            continue
        problems.append(
            f"{inv.where(*key)}: {what} {port} is {ray.what} ({ray.text}) on every host of the Ray "
            f"cluster ({', '.join([tuned.ray.head, *tuned.ray.workers])}); move {key[-1]} outside "
            f"{ray_ports.firewall_text()}"
        )
    return problems


def address_problems(inv: Inventory, tuned: Tuned | None) -> list[str]:
    """One line per Ray host (or monitoring host, which the head's firewall names) whose address
    is a DNS name, with its file:line; [] without Ray."""
    if tuned is None or tuned.ray is None:
        return []
    members = {tuned.ray.head, *tuned.ray.workers}
    problems = []
    for i, host in enumerate(inv.hosts):
        member = host.name in members
        # the head's firewall lets the monitoring hosts reach its metrics port by address too
        if not member and "monitoring" not in inv.host_groups(host):
            continue
        try:
            ip_address(host.address)
        except ValueError:
            why = ("a host of a Ray cluster needs its IP address there (Ray's --node-ip-address and the "
                   "nftables rules that keep Ray's ports to the cluster's hosts name it)") if member else (
                   "a monitoring host of a model spanning hosts needs its IP address there (the Ray "
                   "head's nftables rules let it reach Ray's metrics port by address)")
            problems.append(f"{inv.where('hosts', i, 'address')}: {host.name}'s address {host.address!r} "
                            f"is a DNS name; {why}")
    return problems


def check_ports(inv: Inventory, tuned: Tuned | None) -> None:
    """Refuse deployment ports that are Ray's when the model spans hosts, and Ray hosts named by
    DNS (InventoryError)."""
    problems = port_problems(inv, tuned)
    if problems:
        raise InventoryError(
            f"{len(problems)} port(s) of the deployment collide with Ray's, which a model spanning "
            "hosts runs on each of them",
            problems,
        )
    named = address_problems(inv, tuned)
    if named:
        raise InventoryError(f"{len(named)} host(s) of the Ray cluster or its monitoring have no IP address", named)
