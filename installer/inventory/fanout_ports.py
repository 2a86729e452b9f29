"""The weights fan-out's port against the deployment's other ports on the same hosts (#39).

While `up` runs a fan-out (model.distribute: fanout), each host of the models fanned out serves
its verified weights to the others on one fixed port, weights/serve.py's PORT (8471). A setting
that puts another listener on that port on one of those hosts (an engine, the gateway, Redis or
its sentinel, Prometheus, sshd) would make one of the two fail to bind in the middle of `up`,
so it is refused at validation, at that setting's line, before anything changes on a host. The
engines' further ports (several per host, or several models) are placed around it by the plan
(installer/planning/engines.py, _services)."""

from collections.abc import Iterator

from installer.inventory import redis_ha
from installer.inventory.hosts import Host
from installer.inventory.models import Inventory
from installer.inventory.source import Loc
from installer.weights import serve as weights_serve

PORT = weights_serve.PORT


def fanout_hosts(inv: Inventory) -> list[Host]:
    """The hosts a fan-out runs on: those of the models fanned out (one set: the model checks
    refuse two), when there are two or more (one host fetches from no one)."""
    fanned = [m for m in inv.served_models() if m.model.distribute == "fanout"]
    names = set(fanned[0].hosts) if fanned else set()
    found = [h for h in inv.hosts if h.name in names]
    return found if len(found) > 1 else []


def _listeners(inv: Inventory) -> Iterator[tuple[Loc, str, int, list[Host]]]:
    """(setting, its name, port, the hosts that listen on it) for each port the inventory sets."""
    serving = [h for h in inv.hosts if "serving" in inv.host_groups(h)]
    yield ("ports", "engine"), "ports.engine", inv.ports.engine, serving
    yield ("ports", "gateway"), "ports.gateway", inv.ports.gateway, serving
    redis = redis_ha.layout(inv)
    if redis is not None:
        yield ("ports", "redis"), "ports.redis", inv.ports.redis, [redis.primary, *redis.replicas]
        yield ("ports", "redis_sentinel"), "ports.redis_sentinel", inv.ports.redis_sentinel, list(redis.sentinels)
    monitoring = [h for h in inv.hosts if "monitoring" in inv.host_groups(h)]
    yield ("monitoring", "prometheus_port"), "monitoring.prometheus_port", inv.monitoring.prometheus_port, monitoring
    for i, host in enumerate(inv.hosts):  # sshd: the host's own port, else the inventory's
        if host.ssh.port is not None:
            yield ("hosts", i, "ssh", "port"), f"hosts[{i}].ssh.port", host.ssh.port, [host]
    defaults = [h for h in inv.hosts if h.ssh.port is None]
    yield ("ssh", "port"), "ssh.port", inv.ssh.port, defaults


def problems(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    """(setting, what is wrong) for each port that is the fan-out's on one of its hosts."""
    fanning = {h.name for h in fanout_hosts(inv)}
    if not fanning:
        return
    for loc, what, port, hosts in _listeners(inv):
        clash = [h.name for h in hosts if h.name in fanning]
        if port == PORT and clash:
            yield loc, (
                f"{what} {port} is the weights fan-out's port on {', '.join(clash)} (distribute: fanout: each "
                "host serves the weights to the others there during `up`; fixed); pick another port for "
                f"{what}, or set distribute: push"
            )
