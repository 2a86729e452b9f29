"""Ray preflight over SSH, the remote layer stood in at its edge (remote.run_one): a worker that
cannot reach the head's Ray port, and Ray's ports already in use, are refused before any host
changes, each naming the host, the port and the fix (#36)."""

from collections.abc import Callable

import pytest

from installer.base.errors import PreflightError
from installer.gpu import ray_ports
from installer.hosts import remote
from installer.hosts.ssh import Target
from installer.inventory import Inventory
from installer.preflight import ray_cluster as preflight_ray
from installer.preparation import inventory_checks


def listen(*ports: int, active: bool = False) -> str:
    return f"active={'active' if active else 'inactive'}\nlisten={' '.join(f'{p:04X}' for p in ports)} \n"


class Hosts:
    """What each host answers: the probe's output, and whether the head's port is reachable."""

    def __init__(self, probes: dict[str, str], reach: bool = True, why: str = "timed out") -> None:
        self.probes, self.reach, self.why = probes, reach, why
        self.commands: list[tuple[str, str]] = []

    def __call__(self, t: Target, command: str, **_kw: object) -> remote.Result:
        self.commands.append((t.name, command))
        if command == preflight_ray.PROBE:
            return remote.Result(t.name, 0, self.probes[t.name].encode(), "", 0.1)
        if "s.bind(" in command:  # the head's short-lived listener
            return remote.Result(t.name, 0, b"listening\n", "", 0.1)
        if "create_connection" in command:
            return remote.Result(t.name, 0 if self.reach else 1, b"", "" if self.reach else self.why, 0.1)
        raise AssertionError(command)


def nodes(inv: Inventory) -> list[tuple[str, object]]:
    plan = inventory_checks.check_inventory(inv)
    return [(h.name, h.ray) for h in plan.hosts if h.ray is not None]


def test_a_cluster_that_can_form_passes_and_the_worker_dials_the_heads_address(
    two_hosts: Callable[..., Inventory]
) -> None:
    inv = two_hosts()
    hosts = Hosts({"h0": listen(22), "h1": listen(22, 8080)})
    preflight_ray.check(inv, nodes(inv), hosts)  # type: ignore[arg-type]
    (listener,) = [c for h, c in hosts.commands if "s.bind(" in c]
    assert " 10.0.0.1 6390 1 " in listener  # the head's inventory address, not its name
    (dial,) = [(h, c) for h, c in hosts.commands if "create_connection" in c]
    assert dial[0] == "h1" and dial[1].endswith(" 10.0.0.1 6390 5")


def test_a_worker_that_cannot_reach_the_head_is_refused(two_hosts: Callable[..., Inventory]) -> None:
    inv = two_hosts()
    hosts = Hosts({"h0": listen(22), "h1": listen(22)}, reach=False, why="No route to host")
    with pytest.raises(PreflightError, match="no host was changed") as caught:
        preflight_ray.check(inv, nodes(inv), hosts)  # type: ignore[arg-type]
    (line,) = caught.value.details
    assert line.startswith("h1 (10.0.0.2): cannot reach the Ray head h0 at 10.0.0.1:6390 (No route to host)")
    assert f"open TCP {ray_ports.firewall_text()}" in line


def test_ray_ports_in_use_are_refused_per_host_before_any_connection(two_hosts: Callable[..., Inventory]) -> None:
    inv = two_hosts()
    hosts = Hosts({"h0": listen(22, ray_ports.GCS_PORT), "h1": listen(ray_ports.OBJECT_MANAGER_PORT, 10500, 10501)})
    with pytest.raises(PreflightError) as caught:
        preflight_ray.check(inv, nodes(inv), hosts)  # type: ignore[arg-type]
    assert caught.value.details == [
        "h0 (10.0.0.1): port 6390 of Ray's GCS (workers join the head there) (6390) is already in use; find "
        "the process with `ss -ltnp 'sport = :6390'` and stop or move it: Ray's ports are fixed "
        "(installer/gpu/ray_ports.py, docs/multinode.md)",
        "h1 (10.0.0.2): port 6392 of Ray's object manager (6392) is already in use; find the process with "
        "`ss -ltnp 'sport = :6392'` and stop or move it: Ray's ports are fixed (installer/gpu/ray_ports.py, "
        "docs/multinode.md)",
        "h1 (10.0.0.2): ports 10500, 10501 of Ray's worker processes (10002-19999) are already in use; find the "
        "process with `ss -ltnp 'sport = :10500'` and stop or move it: Ray's ports are fixed "
        "(installer/gpu/ray_ports.py, docs/multinode.md)",
    ]
    assert not [c for _h, c in hosts.commands if "create_connection" in c or "s.bind(" in c]


def test_a_running_cluster_holds_its_own_ports_and_is_dialled_as_it_is(two_hosts: Callable[..., Inventory]) -> None:
    # a redeploy: private-llm-ray is active on both, its listeners are Ray's own; no listener opened
    inv = two_hosts()
    up = listen(ray_ports.GCS_PORT, ray_ports.NODE_MANAGER_PORT, active=True)
    hosts = Hosts({"h0": up, "h1": listen(ray_ports.NODE_MANAGER_PORT, active=True)})
    preflight_ray.check(inv, nodes(inv), hosts)  # type: ignore[arg-type]
    assert not [c for _h, c in hosts.commands if "s.bind(" in c]


def test_the_client_server_port_is_the_heads_alone() -> None:
    assert preflight_ray.taken("worker", {ray_ports.CLIENT_SERVER_PORT}, False) == []
    assert preflight_ray.taken("head", {ray_ports.CLIENT_SERVER_PORT}, False)


def test_the_probe_reads_proc_net_tcp_ports_in_hex() -> None:
    assert preflight_ray.parse("active=active\nlisten=18F6 0016 \n") == (True, {6390, 22})
    assert preflight_ray.parse("active=inactive\nlisten=\n") == (False, set())


def test_no_model_spanning_hosts_runs_no_check(two_hosts: Callable[..., Inventory]) -> None:
    def refuse(*_a: object, **_k: object) -> remote.Result:
        raise AssertionError("no SSH without a Ray cluster")

    inv = two_hosts(gpu="h200")  # fp8 V3 fits one H200 host: replicas, no Ray
    assert nodes(inv) == []
    preflight_ray.check(inv, [], refuse)
