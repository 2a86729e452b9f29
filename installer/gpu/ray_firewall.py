"""The nftables rules that keep a Ray node's ports to the other members of its cluster.

Ray's GCS, raylet and worker ports listen on every address, whatever `--node-ip-address` says,
and take a node or a driver from whoever holds the cluster's token (docs/multinode.md). So each
host of a model spanning hosts gets a table of its own, `inet pli_ray`, which refuses a new TCP
connection to any of its Ray ports (installer/gpu/ray_ports.py) unless it comes from another
member of the group, from the host itself, or (the head's autoscaler metrics, 44217) from a
monitoring host. Nothing else on the host is touched: the table's chain accepts everything
else, and a site's own tables still see every packet (a drop there wins over our accept).

The text is one `nft -f` transaction: it creates the table if absent, deletes it, and defines it
again, so a change of members replaces the rules atomically (never a moment without them) and
re-applying is idempotent. `private-llm-ray-firewall.service` applies it before Ray starts and
deletes the table when stopped (`installer down` stops every private-llm unit).
Standard library only, like ray_ports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address

from installer.gpu import ray_ports

TABLE = "pli_ray"  # family inet: one table for IPv4 and IPv6
UNIT = "private-llm-ray-firewall"  # applies the rules before private-llm-ray starts
# Where the engine role writes them (pli_config_dir): preflight reads the members there.
RULES_PATH = "/etc/private-llm/ray.nft"


def _ranges(ports: Iterable[ray_ports.RayPort]) -> list[tuple[int, int]]:
    """Merged (low, high) intervals: nft refuses overlapping elements of an interval set."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted((p.low, p.high) for p in ports):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _port_set(ranges: list[tuple[int, int]]) -> str:
    items = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges]
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _split(addresses: Iterable[str]) -> tuple[list[str], list[str]]:
    """(IPv4, IPv6) addresses, sorted and without repeats; ValueError for a DNS name."""
    parsed = {ip_address(a) for a in addresses}  # a name fails here: Ray needs addresses too
    return (sorted(str(a) for a in parsed if isinstance(a, IPv4Address)),
            sorted(str(a) for a in parsed if isinstance(a, IPv6Address)))


def member_ports(role: str) -> list[tuple[int, int]]:
    """The intervals only the group's members may reach on a node of `role`."""
    return _ranges(p for p in ray_ports.ports(role) if p.low != ray_ports.AUTOSCALER_METRIC_PORT)


def scraper_ports(role: str) -> list[tuple[int, int]]:
    """What the monitoring hosts may reach as well: the head's autoscaler metrics."""
    return _ranges(p for p in ray_ports.ports(role) if p.low == ray_ports.AUTOSCALER_METRIC_PORT)


def ruleset(role: str, members: Sequence[str], scrapers: Sequence[str] = ()) -> str:
    """The `nft -f` text for a Ray node of `role` ("head"/"worker") whose group is `members`
    (every Ray host's address, this one's included); `scrapers` are the Prometheus hosts."""
    if not members:
        raise ValueError("a Ray cluster has members: the head at least")
    sources = {"members": _split(members), "scrapers": _split(scrapers)}
    guarded = {"members": member_ports(role), "scrapers": scraper_ports(role)}
    lines = [
        f"# private-llm: Ray's ports on this {role} node, for the members of its cluster only",
        "# (installer/gpu/ray_firewall.py). Applied with `nft -f` by " + UNIT + ".service.",
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
    ]
    rules: list[str] = []
    for who, (v4, v6) in sources.items():
        for family, kind, addrs in (("ip", "ipv4_addr", v4), ("ip6", "ipv6_addr", v6)):
            if not addrs or not guarded[who]:
                continue
            name = f"{who}_{'v4' if family == 'ip' else 'v6'}"
            lines += [f"\tset {name} {{", f"\t\ttype {kind}", f"\t\telements = {{ {', '.join(addrs)} }}", "\t}"]
            rules.append(f"\t\ttcp dport {_port_set(guarded[who])} {family} saddr @{name} accept")
    every = _ranges(ray_ports.ports(role))
    lines += [
        "\tchain input {",
        "\t\ttype filter hook input priority filter; policy accept;",
        # the node's own processes reach each other over loopback (its own address included)
        '\t\tiifname "lo" accept',
        # replies to the node's own outgoing connections, whatever local port they left from
        "\t\tct state established,related accept",
        *rules,
        # a reset, not a silent drop: a refused client fails at once with "connection refused"
        f"\t\ttcp dport {_port_set(every)} counter reject with tcp reset",
        "\t}",
        "}",
    ]
    return "\n".join(lines) + "\n"
