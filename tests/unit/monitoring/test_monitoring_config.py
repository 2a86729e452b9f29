"""Prometheus and Alertmanager configuration as the role renders it from an inventory, checked
by promtool/amtool; and the inventory side: who monitors, which OS packages each group gets."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from installer.ansible import render as ansible_render
from installer.bundle import os_packages
from installer.inventory.models import Inventory
from installer.planning import plan as deployment_plan
from tests.support.monitoring_render import inventory_vars, render

SERVING = {"gpu1": "10.0.0.11", "gpu2": "10.0.0.12", "gpu6": "fd00::6"}


def _check(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which(tool)
    if exe is None:
        pytest.fail(f"{tool} is missing: `sudo bash .ci/setup` installs Debian's prometheus packages")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)


def _jobs(text: str) -> dict[str, list[dict]]:
    config = yaml.safe_load(text)
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_scrape_config_covers_every_host_and_passes_promtool(tmp_path: Path) -> None:
    token = tmp_path / "scrape.token"
    token.write_text("t" * 64)  # promtool checks that the credentials file exists
    variables = inventory_vars(SERVING, ["mon"], _monitoring_token_file=str(token))
    variables["hostvars"]["mon"] = {"ansible_host": "10.0.0.5"}
    variables["groups"]["monitoring"] = ["mon"]
    text = render("prometheus.yml.j2", **variables)
    (tmp_path / "prometheus.yml").write_text(text)
    proc = _check("promtool", "check", "config", str(tmp_path / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    jobs = _jobs(text)
    targets = {name: [(t, sc["labels"]) for sc in job["static_configs"] for t in sc["targets"]]
               for name, job in jobs.items()}
    assert [t for t, _ in targets["gateway"]] == ["10.0.0.11:8080", "10.0.0.12:8080", "[fd00::6]:8080"]
    # Engines only through their gateway: the engine port is never a target.
    assert all(":8000" not in t for ts in targets.values() for t, _ in ts)
    # Each engine once, through the gateway on its own host.
    assert [(t, labels["__metrics_path__"], labels["pli_engine"]) for t, labels in targets["vllm"]] == [
        ("10.0.0.11:8080", "/metrics/engines/gpu1", "gpu1"),
        ("10.0.0.12:8080", "/metrics/engines/gpu2", "gpu2"),
        ("[fd00::6]:8080", "/metrics/engines/gpu6", "gpu6"),
    ]
    # node_exporter on the serving hosts and on the monitoring-only host too.
    assert [labels["host"] for _, labels in targets["node"]] == ["gpu1", "gpu2", "gpu6", "mon"]
    assert "gpu" not in jobs  # CPU deployment: no GPU exporter
    assert jobs["gateway"]["scheme"] == "http" and "tls_config" not in jobs["gateway"]
    assert yaml.safe_load(text)["global"]["scrape_interval"] == "15s"


def test_https_gateways_are_scraped_with_the_deployment_ca_and_gpus_get_a_job(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read by a config check")
    token = tmp_path / "scrape.token"
    token.write_text("t" * 64)
    variables = inventory_vars(
        {"gpu1": "10.0.0.11"}, ["gpu1"], pli_gateway_scheme="https", monitoring_gpu_exporter="nvml",
        _monitoring_ca_file=str(ca), _monitoring_token_file=str(token),
    )
    text = render("prometheus.yml.j2", **variables)
    (tmp_path / "prometheus.yml").write_text(text)
    proc = _check("promtool", "check", "config", str(tmp_path / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = _jobs(text)
    for name in ("gateway", "vllm"):
        assert jobs[name]["scheme"] == "https"
        assert jobs[name]["tls_config"] == {"ca_file": str(ca)}
    assert jobs["gpu"]["static_configs"][0]["targets"] == ["10.0.0.11:9400"]


@pytest.mark.parametrize("webhook", ["", "https://pager.example.net/hook?x=1"])
def test_alertmanager_config_passes_amtool(webhook: str, tmp_path: Path) -> None:
    text = render("alertmanager.yml.j2", monitoring_webhook_url=webhook)
    (tmp_path / "alertmanager.yml").write_text(text)
    proc = _check("amtool", "check-config", str(tmp_path / "alertmanager.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load(text)
    assert config["route"]["receiver"] == ("webhook" if webhook else "none")


def _inventory(hosts: list[dict], **extra: object) -> Inventory:
    return Inventory.model_validate({
        "deployment": "prod-a", "hosts": hosts,
        "model": {"path": "/m", "served_name": "m"}, **extra,
    })


def test_the_first_host_monitors_unless_the_inventory_names_monitoring_hosts() -> None:
    inv = _inventory([{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.2"}])
    assert [inv.host_groups(h) for h in inv.hosts] == [["serving", "monitoring"], ["serving"]]
    assert ansible_render.hosts_yaml(deployment_plan.build(inv))["all"]["children"]["monitoring"]["hosts"] == {"a": {}}
    inv = _inventory([
        {"name": "a", "address": "10.0.0.1"},
        {"name": "mon", "address": "10.0.0.9", "groups": ["monitoring"]},
    ])
    assert [inv.host_groups(h) for h in inv.hosts] == [["serving"], ["monitoring"]]


def test_monitoring_packages_go_to_the_monitoring_group_and_node_exporter_everywhere() -> None:
    want = os_packages.wanted(_inventory([{"name": "a", "address": "10.0.0.1"}]))
    assert {"prometheus", "prometheus-alertmanager", "prometheus-node-exporter"} <= set(want["monitoring"])
    assert "prometheus-node-exporter" in want["serving"]
    assert "prometheus" not in want["serving"]


def test_the_inventory_monitoring_section_reaches_the_role() -> None:
    inv = _inventory([{"name": "a", "address": "10.0.0.1"}],
                     monitoring={"alert_profile": "test", "ttft_p99_target_s": 0.8, "retention": "30d"})
    got = ansible_render._monitoring_vars(deployment_plan.build(inv))
    assert got["monitoring_alert_profile"] == "test"
    assert got["monitoring_ttft_p99_target_s"] == 0.8
    assert got["monitoring_retention"] == "30d"
    defaults = yaml.safe_load((Path(__file__).parents[3] / "playbooks/roles/monitoring/defaults/main.yml").read_text())
    assert set(got) <= set(defaults), "every rendered monitoring_* variable is a documented role option"


def test_a_ray_head_is_scraped_for_the_clusters_metrics(tmp_path: Path) -> None:
    # A model spanning hosts (#36): the Ray head's autoscaler metrics, at the head's address.
    token = tmp_path / "scrape.token"
    token.write_text("t" * 64)
    variables = inventory_vars({"h0": "10.0.0.1", "h1": "10.0.0.2"}, ["h0"], _monitoring_token_file=str(token),
                               monitoring_ray_heads=["h0"], monitoring_ray_metrics_port=44217)
    text = render("prometheus.yml.j2", **variables)
    (tmp_path / "prometheus.yml").write_text(text)
    proc = _check("promtool", "check", "config", str(tmp_path / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _jobs(text)["ray"]["static_configs"] == [{"targets": ["10.0.0.1:44217"], "labels": {"host": "h0"}}]
    # without a Ray cluster, no job
    assert "ray" not in _jobs(render("prometheus.yml.j2", **inventory_vars(
        {"h0": "10.0.0.1"}, ["h0"], _monitoring_token_file=str(token))))
