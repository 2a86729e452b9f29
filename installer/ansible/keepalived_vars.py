"""The keepalived role's variables (playbooks/roles/keepalived), from the inventory's `frontend:`
and the plan: every gateway host's address (the unicast peers), a priority each, and the URL of
its own gateway's /readyz. Nothing when there is no frontend, so other deployments keep their
variables' digest."""

from typing import Any

from installer.planning.plan import DeploymentPlan

# The first gateway host starts as the holder; each later one ranks below (VRRP: 1-254).
TOP_PRIORITY = 200


def priorities(names: list[str]) -> dict[str, int]:
    return {name: max(TOP_PRIORITY - 2 * i, 2) for i, name in enumerate(names)}


def group_vars(plan: DeploymentPlan) -> dict[str, Any]:
    inv = plan.inventory
    fe = inv.frontend
    if fe is None:
        return {}
    serving = plan.serving()
    return {
        "keepalived_vip": fe.vip,
        "keepalived_router_id": fe.router_id,
        "keepalived_interface": fe.interface or "",
        "keepalived_peers": {hp.name: hp.host.address for hp in serving},
        "keepalived_priorities": priorities([hp.name for hp in serving]),
        "keepalived_check_interval_s": fe.check_interval_s,
        "keepalived_advert_interval_s": fe.advert_interval_s,
    }


def host_vars(plan: DeploymentPlan, gateway_url: str) -> dict[str, Any]:
    """A gateway host's own check: its gateway as `installer up` proves it (by its certificate's
    address with TLS), verified with the deployment CA."""
    if plan.inventory.frontend is None:
        return {}
    on = plan.inventory.tls.mode != "off"
    return {
        "keepalived_check_url": f"{gateway_url}/readyz",
        "keepalived_check_ca": f"{plan.layout['pli_tls_dir']}/ca.pem" if on else "",
    }
