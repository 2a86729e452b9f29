"""The gateways' metrics need Prometheus's scrape token (service/scrape_auth.py): the gateway
role's rendered settings and the monitoring role's rendered scrape configuration agree on it, both
roles write it from the one file the installer generates, and the API documents stay off."""

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from installer.ansible import render
from installer.bundle.manifest import Manifest
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from service.config import Settings
from tests.support.gateway_role import gateway_config
from tests.support.monitoring_render import inventory_vars
from tests.support.monitoring_render import render as render_monitoring

ROLES = Path(__file__).parents[3] / "playbooks" / "roles"
CONFIG_DIR = "/etc/private-llm"


def _gateway_settings(tls: bool, **overrides: Any) -> Settings:
    """gateway.yml as the gateway role renders it, read by the gateway's own settings model."""
    return Settings.model_validate(gateway_config({
        "gateway_workers": 1,
        "pli_config_dir": CONFIG_DIR, "pli_tls_enabled": tls, "pli_tls_dir": f"{CONFIG_DIR}/tls",
        "gateway_engines": [{"name": "gpu1", "url": "http://127.0.0.1:8000", "model": "m"}],
        **overrides,
    }))


def _task(role: str, name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROLES / role / "tasks" / "configure.yml").read_text())
    return next(t for t in tasks if t["name"] == name)


@pytest.mark.parametrize("tls", [False, True])
def test_prometheus_scrapes_the_gateway_where_and_how_the_gateway_serves_its_metrics(
    tls: bool, tmp_path: Path
) -> None:
    gateway = _gateway_settings(tls, gateway_port=9443)
    # Metrics on the API port (no separate listener), behind the token file.
    assert gateway.metrics_port is None
    assert gateway.metrics_token_file == Path(CONFIG_DIR) / "metrics.token"
    assert gateway.docs is False

    token_file = tmp_path / "scrape.token"
    variables = inventory_vars(
        {"gpu1": "10.0.0.11"}, ["gpu1"],
        pli_gateway_scheme="https" if tls else "http", _monitoring_token_file=str(token_file),
    )
    variables["gateway_port"] = 9443  # one inventory value (ports.gateway) for both roles
    jobs = {j["job_name"]: j for j in yaml.safe_load(render_monitoring("prometheus.yml.j2", **variables))[
        "scrape_configs"]}
    for name in ("gateway", "vllm"):
        job = jobs[name]
        # Every request to the gateway's metrics carries the token, over TLS when the gateway has it.
        assert job["authorization"] == {"type": "Bearer", "credentials_file": str(token_file)}, name
        assert job["scheme"] == ("https" if tls else "http")
        assert [t for sc in job["static_configs"] for t in sc["targets"]] == [f"10.0.0.11:{gateway.port}"]
    # Nothing else is sent the gateways' token.
    assert all("authorization" not in j for n, j in jobs.items() if n not in ("gateway", "vllm"))


def test_both_roles_write_the_one_generated_token_privately() -> None:
    gateway = _task("gateway", "Write the metrics scrape token")
    monitoring = _task("monitoring", "Write the gateways' scrape token")
    internal = yaml.safe_load((ROLES / "monitoring" / "vars" / "main.yml").read_text())
    assert gateway["ansible.builtin.copy"]["dest"] == "{{ pli_config_dir }}/metrics.token"
    assert str(_gateway_settings(False).metrics_token_file) == f"{CONFIG_DIR}/metrics.token"
    assert monitoring["ansible.builtin.copy"]["dest"] == "{{ _monitoring_token_file }}"
    assert internal["_monitoring_token_file"].startswith("/etc/prometheus/")
    for task, group in ((gateway, "{{ pli_user }}"), (monitoring, "prometheus")):
        copy = task["ansible.builtin.copy"]
        assert copy["content"].startswith("{{ lookup('ansible.builtin.file', pli_metrics_token_src) }}")
        assert (copy["owner"], copy["group"], copy["mode"]) == ("root", group, "0640")
        assert task["no_log"] is True
    uninstall = yaml.safe_load((ROLES / "uninstall" / "defaults" / "main.yml").read_text())
    assert internal["_monitoring_token_file"] in uninstall["uninstall_paths"]


def test_the_installer_generates_the_token_once_and_keeps_it_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    site.write_text("deployment: demo\nmodel: {path: w, served_name: tiny}\nhosts: [{name: h1, address: 10.0.0.1}]\n")
    man = Manifest(target={}, components={}, packages=[])
    secret_files.prepare(deployment_plan.build(load_inventory(site)))  # as the flows do before rendering

    def run(n: int) -> tuple[dict[str, Any], Path]:
        """What a run of `installer up` renders into its run directory."""
        inv_dir = render.write(deployment_plan.build(load_inventory(site)), man, tmp_path / f"run{n}")
        return yaml.safe_load((inv_dir / "group_vars" / "all.yml").read_text()), inv_dir

    first, inv_dir = run(1)
    path = Path(first["pli_metrics_token_src"])
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # A path for Ansible's file lookup, never the token itself, in the run directory.
    assert all(token not in f.read_text() for f in inv_dir.rglob("*") if f.is_file())
    # Stable: a second run must not lock Prometheus out of gateways it has not reached yet.
    assert run(2)[0]["pli_metrics_token_src"] == str(path)
    assert path.read_text() == token
    # The API documents are off unless the inventory asks for them.
    assert first["gateway_docs"] is False
    site.write_text(site.read_text() + "gateway: {docs: true}\n")
    assert run(3)[0]["gateway_docs"] is True
    assert _gateway_settings(False, gateway_docs=True).docs is True
