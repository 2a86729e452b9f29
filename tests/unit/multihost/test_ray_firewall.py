"""The nftables rules keeping Ray's ports to the cluster's hosts (installer/gpu/ray_firewall.py),
in the deployment plan (tests/unit/gpu/test_gpu_engines.py renders the role's unit and file from
it); the Ray hosts' addresses checked
at validation; nftables in the bundle. tests/integration/test_ray_firewall.py loads the same
text into real nftables."""

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from installer.base.errors import InventoryError, PreflightError
from installer.bundle import os_packages
from installer.gpu import ray_firewall, ray_ports
from installer.hosts import remote
from installer.hosts.ssh import Target
from installer.inventory import Inventory, load_inventory
from installer.preflight import ray_cluster as preflight_ray
from installer.preparation import inventory_checks

MON = "  - {name: mon, address: 10.0.0.9, groups: [monitoring]}\n"


def _rules(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(("tcp ", "iifname", "ct "))]


def test_head_rules_let_members_in_and_prometheus_to_the_metrics_only() -> None:
    text = ray_firewall.ruleset("head", ["10.0.0.2", "10.0.0.1", "10.0.0.1"], ["10.0.0.9"])
    # created, deleted and defined again in one transaction: a re-apply replaces, never appends
    assert text.splitlines()[2:5] == ["table inet pli_ray", "delete table inet pli_ray", "table inet pli_ray {"]
    assert "elements = { 10.0.0.1, 10.0.0.2 }" in text and "elements = { 10.0.0.9 }" in text
    assert _rules(text) == [
        'iifname "lo" accept',
        "ct state established,related accept",
        "tcp dport { 6390-6396, 10001-19999 } ip saddr @members_v4 accept",
        "tcp dport 44217 ip saddr @scrapers_v4 accept",
        "tcp dport { 6390-6396, 10001-19999, 44217 } counter reject with tcp reset",
    ]
    assert "policy accept" in text  # nothing but Ray's ports is touched
    assert "ip6" not in text.replace("inet", "")  # no IPv6 member: IPv6 to Ray's ports is refused


def test_every_pinned_port_is_guarded() -> None:
    for role in ("head", "worker"):
        last = _rules(ray_firewall.ruleset(role, ["10.0.0.1"]))[-1]
        guarded = [tuple(map(int, r.split("-"))) if "-" in r else (int(r), int(r))
                   for r in re.findall(r"\d+(?:-\d+)?", last.split("counter")[0])]
        for p in ray_ports.ports(role):
            assert any(lo <= p.low and p.high <= hi for lo, hi in guarded), (role, p)


def test_worker_rules_and_ipv6_members() -> None:
    text = ray_firewall.ruleset("worker", ["10.0.0.1", "fd00::2"], ["10.0.0.9"])
    assert _rules(text)[2:] == [
        "tcp dport { 6391-6396, 10002-19999 } ip saddr @members_v4 accept",
        "tcp dport { 6391-6396, 10002-19999 } ip6 saddr @members_v6 accept",
        # a worker serves no autoscaler metrics, so the monitoring hosts get nothing here
        "tcp dport { 6391-6396, 10002-19999 } counter reject with tcp reset",
    ]
    assert "type ipv6_addr\n\t\telements = { fd00::2 }" in text and "scrapers" not in text


def test_a_dns_name_is_refused() -> None:
    with pytest.raises(ValueError):
        ray_firewall.ruleset("head", ["h0.example"])


def _rewritten(tmp_path: Path, two_hosts: Callable[..., Inventory], old: str, new: str) -> Inventory:
    two_hosts()  # writes tmp_path/inventory.yml
    f = tmp_path / "inventory.yml"
    f.write_text(f.read_text().replace(old, new))
    return load_inventory(f)


def test_the_plan_gives_each_ray_host_its_rules(two_hosts: Callable[..., Inventory]) -> None:
    head, worker = inventory_checks.check_inventory(two_hosts()).hosts
    assert head.ray and worker.ray
    # no monitoring host named: the first host is one (Inventory.host_groups)
    assert head.ray.firewall == ray_firewall.ruleset("head", ["10.0.0.1", "10.0.0.2"], ["10.0.0.1"])
    assert worker.ray.firewall == ray_firewall.ruleset("worker", ["10.0.0.1", "10.0.0.2"], ["10.0.0.1"])


def test_a_separate_monitoring_host_may_scrape_the_head(tmp_path: Path, two_hosts: Callable[..., Inventory]) -> None:
    inv = _rewritten(tmp_path, two_hosts, "engine:", MON + "engine:")
    head = next(h for h in inventory_checks.check_inventory(inv).hosts if h.ray and h.ray.role == "head")
    assert head.ray is not None
    assert head.ray.firewall == ray_firewall.ruleset("head", ["10.0.0.1", "10.0.0.2"], ["10.0.0.9"])


def test_a_ray_host_named_by_dns_is_refused_with_file_line(
    tmp_path: Path, two_hosts: Callable[..., Inventory]
) -> None:
    inv = _rewritten(tmp_path, two_hosts, "address: 10.0.0.2", "address: h1.example")
    with pytest.raises(InventoryError, match="Ray cluster or its monitoring have no IP address") as caught:
        inventory_checks.check_inventory(inv)
    (problem,) = caught.value.details
    assert problem.startswith(f"{tmp_path / 'inventory.yml'}:5: hosts[1].address") or "inventory.yml:5" in problem
    assert "'h1.example' is a DNS name" in problem and "IP address" in problem


def test_a_monitoring_host_named_by_dns_is_refused_with_file_line_when_a_model_spans_hosts(
    tmp_path: Path, two_hosts: Callable[..., Inventory]
) -> None:
    # the head's rules name the scrapers by address: a name was a traceback in plan building
    inv = _rewritten(tmp_path, two_hosts, "engine:", MON.replace("10.0.0.9", "prom.example") + "engine:")
    with pytest.raises(InventoryError, match="no IP address") as caught:
        inventory_checks.check_inventory(inv)
    (problem,) = caught.value.details
    assert "inventory.yml:" in problem and "'prom.example' is a DNS name" in problem and "monitoring" in problem


def test_gpu_bundles_of_several_serving_hosts_carry_nftables(
    tmp_path: Path, two_hosts: Callable[..., Inventory]
) -> None:
    assert "nftables" in os_packages.wanted(two_hosts())["serving"]
    one = _rewritten(tmp_path, two_hosts, "  - {name: h1, address: 10.0.0.2}\n", "")
    assert "nftables" not in os_packages.all_names(os_packages.wanted(one))


def test_preflight_reads_the_members_from_the_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "ray.nft"
    rules.write_text(ray_firewall.ruleset("head", ["10.0.0.1", "10.0.0.2", "fd00::5"], ["10.0.0.9"]))
    probe = preflight_ray.PROBE.replace(ray_firewall.RULES_PATH, str(rules))
    out = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, check=True).stdout
    assert preflight_ray.firewall_members(out) == {"10.0.0.1", "10.0.0.2", "fd00::5"}  # not the scraper
    gone = subprocess.run(["sh", "-c", probe.replace(str(rules), str(tmp_path / "none"))],
                          capture_output=True, text=True, check=True).stdout
    assert preflight_ray.firewall_members(gone) is None


@pytest.mark.parametrize(("members", "dialled"), [("10.0.0.1 10.0.0.2", True), ("10.0.0.1", False), (None, True)])
def test_preflight_dials_no_worker_the_heads_own_firewall_shuts_out_until_up(
    two_hosts: Callable[..., Inventory], members: str | None, dialled: bool
) -> None:
    inv = two_hosts()
    nodes = [(h.name, h.ray) for h in inventory_checks.check_inventory(inv).hosts if h.ray is not None]
    head_probe = "active=active\nlisten=18F6\n" + (f"firewall= {members}\n" if members is not None else "")
    commands: list[str] = []

    def run_one(t: Target, command: str, **_kw: object) -> remote.Result:
        commands.append(command)
        if command == preflight_ray.PROBE:
            text = head_probe if t.name == "h0" else "active=active\nlisten=\n"
            return remote.Result(t.name, 0, text.encode(), "", 0.1)
        if "create_connection" in command:  # refused, as our own table refuses a non-member
            return remote.Result(t.name, 1, b"", "Connection refused", 0.1)
        raise AssertionError(command)

    if dialled:  # a member (or no firewall yet) refused is the network's fault: refused before any change
        with pytest.raises(PreflightError, match="no host was changed") as caught:
            preflight_ray.check(inv, nodes, run_one)  # type: ignore[arg-type]
        (problem,) = caught.value.details
        assert "cannot reach the Ray head h0 at 10.0.0.1:6390 (Connection refused)" in problem
    else:  # a worker new to the group: `up` lets it in before Ray restarts
        preflight_ray.check(inv, nodes, run_one)  # type: ignore[arg-type]
        assert not any("create_connection" in c for c in commands)
