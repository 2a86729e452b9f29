"""One `installer status` report of a deployment: every collector of installer.status.COLLECTORS
over the serving hosts' engines, with Prometheus found on the first monitoring host."""

from installer import status
from installer.inventory import Inventory
from installer.planning import plan
from installer.status.model import Context, StatusReport, collect


def prometheus_url(inv: Inventory) -> str | None:
    """Prometheus on the first monitoring host (by default the inventory's first host)."""
    monitors = [h for h in inv.hosts if "monitoring" in inv.host_groups(h)]
    if not monitors:
        return None
    address = monitors[0].address
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{inv.monitoring.prometheus_port}"


def report(inv: Inventory, prometheus: str | None, timeout_s: float) -> StatusReport:
    """The report now; `prometheus` None: the first monitoring host's."""
    ctx = Context(inv, prometheus or prometheus_url(inv), timeout_s)
    names = plan.build(inv).engine_names
    # status.COLLECTORS looked up at each call: other modules (and tests) extend or replace it
    return collect(ctx, status.COLLECTORS, lambda host: list(names(host.name)))
