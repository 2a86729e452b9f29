"""Ray's pinned ports against the deployment's own, refused at validation with file:line (#36)."""

from collections.abc import Callable

import pytest

from installer.base.errors import InventoryError
from installer.gpu import ray_ports
from installer.inventory import Inventory
from installer.preparation import inventory_checks


def test_every_ray_port_is_pinned_on_the_units(two_hosts: Callable[..., Inventory]) -> None:
    p = inventory_checks.check_inventory(two_hosts())
    head, worker = (h.ray for h in p.hosts)
    assert head is not None and worker is not None
    for node, role in ((head, "head"), (worker, "worker")):
        for port in ray_ports.ports(role):
            if port.flag and port.flag != "--port":
                assert f"{port.flag}={port.low}" in node.argv
        assert f"--min-worker-port={ray_ports.MIN_WORKER_PORT}" in node.argv
    assert f"--port={ray_ports.GCS_PORT}" in head.argv


@pytest.mark.parametrize(("extra", "key", "line", "what"), [
    ("ports: {gateway: 6391}\n", "ports.gateway", 8, "Ray's node manager"),
    ("ports: {redis: 6390}\n", "ports.redis", 8, "Ray's GCS"),
    ("ports: {engine: 10500}\n", "ports.engine", 8, "Ray's worker processes"),
    ("monitoring: {prometheus_port: 10001}\n", "monitoring.prometheus_port", 8, "Ray's client server"),
    # not pinned by a flag: the head's autoscaler monitor listens there by Ray's default (lab, #36)
    ("ports: {gateway: 44217}\n", "ports.gateway", 8, "Ray's autoscaler metrics"),
])
def test_a_deployment_port_inside_rays_is_refused_with_its_line(
    two_hosts: Callable[..., Inventory], extra: str, key: str, line: int, what: str
) -> None:
    inv = two_hosts(extra=extra)
    with pytest.raises(InventoryError, match="collide with Ray's") as caught:
        inventory_checks.check_inventory(inv)
    (problem,) = caught.value.details
    assert f"inventory.yml:{line}: {key}" in problem and what in problem
    assert "h0, h1" in problem and ray_ports.firewall_text() in problem


def test_ray_ports_are_free_to_use_when_no_model_spans_hosts(two_hosts: Callable[..., Inventory]) -> None:
    # a model that fits one host runs no Ray: its gateway may sit where Ray's node manager would
    inv = two_hosts(preset="deepseek-r1-distill-llama-70b", extra="ports: {gateway: 6391}\n")
    p = inventory_checks.check_inventory(inv)
    assert all(h.ray is None for h in p.hosts)
