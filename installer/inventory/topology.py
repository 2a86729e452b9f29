"""Which hosts do what in a deployment, derived from the inventory alone.

The deployment plan (installer/planning/plan.py), the bundle's OS package list and `keys push` all ask
these questions, so they are answered once here, below all of them.
"""

from installer.inventory import Host, Inventory

# Layout on every host (docs/architecture.md, "On each host"); the roles get it as group vars.
HOST_LAYOUT = {
    "pli_user": "private-llm",
    "pli_root": "/opt/private-llm",
    "pli_config_dir": "/etc/private-llm",
    "pli_state_dir": "/var/lib/private-llm",
    "pli_cache_dir": "/var/cache/private-llm",
    "pli_tls_dir": "/etc/private-llm/tls",
    # A gray release's weights per model, written by the control machine (installer/release/).
    "pli_stages_file": "/etc/private-llm/stages.json",
}


def serving_hosts(inv: Inventory) -> list[Host]:
    return [h for h in inv.hosts if "serving" in inv.host_groups(h)]


def cross_host(inv: Inventory) -> bool:
    """Several serving hosts: every gateway routes over every engine, so engines listen on
    their host's address (with TLS unless tls.mode is off) instead of loopback."""
    return len(serving_hosts(inv)) > 1


def redis_host(inv: Inventory) -> Host | None:
    """The host that keeps the per-key limits, the usage record and the token quotas of the
    deployment's gateways: the first serving host, also when it is the only one (None only for
    an inventory without serving hosts yet, such as a cloud one before provisioning)."""
    hosts = serving_hosts(inv)
    return hosts[0] if hosts else None


def controller_hosts(inv: Inventory) -> list[Host]:
    """Where the release controller runs (playbooks/roles/monitoring/tasks/release_controller.yml):
    monitoring hosts that also serve, which have what it needs, the gateway's venv, the
    deployment certificate and a route to Redis (loopback on a single host). A monitoring-only
    host has none of them (docs/day2.md says why it gets none)."""
    return [h for h in serving_hosts(inv) if "monitoring" in inv.host_groups(h)]
