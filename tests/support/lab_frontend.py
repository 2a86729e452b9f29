"""The shared lab's `frontend:` section (#37): a virtual IP that keepalived on the two lab hosts
moves between them, appended to the lab inventory before the first deploy like the tenants'
`auth` section, so every end-to-end test runs with keepalived in the hosts and one first `up`
installs it (no second deploy for the VIP test)."""

from ipaddress import ip_network
from pathlib import Path

# Below the lab's hosts (.11 and up, installer/lab/naming.py) and above its control namespace
# (.2): free in any lab subnet down to the /28 the lab allows.
VIP_OFFSET = 10
# Each lab has its own bridge, so two labs on one machine may use the same id.
ROUTER_ID = 37
NAME = "llm.lab.internal"


def vip(subnet: str) -> str:
    net = ip_network(subnet)
    return f"{net.network_address + VIP_OFFSET}/{net.prefixlen}"


def section(subnet: str) -> str:
    return f"\nfrontend:\n  vip: {vip(subnet)}\n  name: {NAME}\n  router_id: {ROUTER_ID}\n"


def setup(inventory: Path, subnet: str) -> str:
    """Append the section to `inventory` (rewritten by each `lab up`, so once per run); the VIP."""
    with inventory.open("a") as out:
        out.write(section(subnet))
    return vip(subnet)
