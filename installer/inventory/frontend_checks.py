"""`frontend:` against the rest of the inventory: `validate` and `up` refuse, at the setting's
file and line, a virtual IP that VRRP cannot hold here (docs/ha.md#one-address-for-clients).

- A cloud provider: its network drops VRRP's multicast and does not let an instance take
  another's address, so the VIP would never reach clients; the cloud's load balancer does this.
- Fewer than 2 gateway (serving) hosts: nothing to fail over to.
- A gateway host whose address is a DNS name or lies outside the VIP's subnet: keepalived's
  unicast peers are those addresses, and the VIP must be on the link they share.
- A VIP that is some host's own address: the holder would take it from that host.

A clash of the VRRP id with another group on the link cannot be seen from the inventory; `up`'s
preflight listens for one on the hosts (installer/preflight/vrrp.py).
"""

from collections.abc import Iterator
from ipaddress import ip_address, ip_interface

from installer.inventory.models import Inventory
from installer.inventory.source import Loc

# Where to go instead of VRRP, per provider.
CLOUD_BALANCER = {
    "aws": "an AWS Network Load Balancer",
    "tencentcloud": "a Tencent Cloud CLB",
    "jdcloud": "a JD Cloud load balancer (CLB)",
}


def check(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    fe = inv.frontend
    if fe is None:
        return
    if inv.provider != "baremetal":
        yield ("frontend",), (
            f"provider {inv.provider} does not carry VRRP (its network filters the adverts and an instance "
            f"cannot take another's address); remove frontend and put {CLOUD_BALANCER[inv.provider]} "
            f"in front of the gateways' port {inv.ports.gateway} (docs/ha.md#clouds)"
        )
        return
    vip = ip_interface(fe.vip)
    serving = [(i, h) for i, h in enumerate(inv.hosts) if "serving" in inv.host_groups(h)]
    if len(serving) < 2:
        yield ("frontend",), (
            f"a virtual IP needs at least 2 gateway (serving) hosts to move between; this inventory has "
            f"{len(serving)}: add a serving host or remove frontend"
        )
    for host in inv.hosts:
        if host.address == str(vip.ip):
            yield ("frontend", "vip"), f"{vip.ip} is host {host.name!r}'s own address; pick a free address"
    for i, host in serving:
        try:
            addr = ip_address(host.address)
        except ValueError:
            yield ("hosts", i, "address"), (
                f"host {host.name!r} is reached as {host.address!r}, a DNS name; with frontend each gateway "
                "host needs its IP address here (keepalived's unicast peers are these addresses)"
            )
            continue
        if addr.version != vip.version or addr not in vip.network:
            yield ("hosts", i, "address"), (
                f"host {host.name!r} ({addr}) is not on the virtual IP's subnet {vip.network} "
                f"(frontend.vip {fe.vip}, line {inv.line('frontend', 'vip') or '?'}); the VIP must be on "
                "the link every gateway host shares: pick a VIP in their subnet, or fix its prefix"
            )
