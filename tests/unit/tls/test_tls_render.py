"""What the installer tells Ansible about TLS, cross-host routing and the shared Redis: URLs,
bind addresses, certificate file paths (never their contents) and no secret in the run dir."""

from pathlib import Path

import pytest
import yaml

from installer.ansible import render
from installer.bundle import os_packages
from installer.bundle.manifest import Manifest
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from installer.tls import prepare


def _inv(tmp_path: Path, hosts: int, tls: str = "") -> Path:
    (tmp_path / "w").mkdir(exist_ok=True)
    (tmp_path / "w" / "config.json").write_text("{}")
    lines = "".join(f"  - {{name: h{i}, address: 10.0.0.{i}}}\n" for i in range(1, hosts + 1))
    path = tmp_path / "site.yml"
    path.write_text(f"deployment: demo\nmodel: {{path: w, served_name: tiny}}\nhosts:\n{lines}{tls}")
    return path


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


MAN = Manifest(target={}, components={}, packages=[])


def test_one_host_keeps_its_engine_and_its_redis_on_loopback_and_serves_https(tmp_path: Path) -> None:
    inv = load_inventory(_inv(tmp_path, 1))
    p = deployment_plan.build(inv)
    gv = render.group_vars(p, MAN)
    assert gv["gateway_engines"] == [
        {"name": "h1", "url": "http://127.0.0.1:8000", "model": "tiny", "task": "generate", "stage": "stable",
         "max_model_len": 4096}
    ]
    assert gv["pli_tls_enabled"] is True and gv["pli_gateway_scheme"] == "https"
    assert gv["pli_tls_dir"] == "/etc/private-llm/tls"
    # Its own Redis (limits, usage record, quotas) for its gateway alone: loopback, a password, no TLS.
    assert gv["redis_host"] == "h1" and gv["redis_bind_address"] == "127.0.0.1" and gv["redis_tls"] is False
    assert gv["gateway_redis_url"] == (
        "redis://:{{ lookup('ansible.builtin.file', redis_password_file) }}@127.0.0.1:6379/0")
    assert gv["redis_password_file"] == str(secret_files.redis_password_file("demo"))
    assert p.hosts[0].package_groups == ("serving", "monitoring", "redis")
    host = render.hosts_yaml(p)["all"]["hosts"]["h1"]
    assert host["engine_bind_address"] == "127.0.0.1" and host["engine_tls"] is False
    assert host["healthcheck_gateway_url"] == "https://10.0.0.1:8080"
    assert host["tls_key_src"].endswith("tls/demo/hosts/h1/server.key")
    assert os_packages.wanted_for_target(inv, inv.os.target)["redis"] == ["redis-server"]


def test_several_hosts_route_over_every_engine_over_tls(tmp_path: Path, state: Path) -> None:
    inv = load_inventory(_inv(tmp_path, 3))
    gv = render.group_vars(deployment_plan.build(inv), MAN)
    assert [e["url"] for e in gv["gateway_engines"]] == [
        "https://10.0.0.1:8000", "https://10.0.0.2:8000", "https://10.0.0.3:8000",
    ]
    hosts = render.hosts_yaml(deployment_plan.build(inv))["all"]["hosts"]
    assert hosts["h2"]["engine_bind_address"] == "10.0.0.2" and hosts["h2"]["engine_tls"] is True
    assert hosts["h2"]["healthcheck_url"] == "https://10.0.0.2:8000"
    assert gv["healthcheck_client_cert"] == "/etc/private-llm/tls/server.pem"
    # Redis on the first serving host, TLS, password read by Ansible from a 0600 file.
    assert gv["redis_host"] == "h1" and gv["redis_bind_address"] == "10.0.0.1" and gv["redis_tls"] is True
    assert gv["gateway_redis_url"].startswith("rediss://:{{ lookup('ansible.builtin.file', redis_password_file) }}@")
    assert gv["gateway_redis_url"].endswith("@10.0.0.1:6379/0")
    password = Path(gv["redis_password_file"])
    assert not password.exists()  # rendering writes no secret: the flow makes it first
    secret_files.prepare(deployment_plan.build(inv))
    assert secret_files.redis_password_file(inv.deployment) == password
    assert password.stat().st_mode & 0o777 == 0o600 and len(password.read_text()) == 64
    assert os_packages.wanted(inv)["redis"] == ["redis-server"]
    # Nothing secret in what is written to the run directory.
    prepare(inv)
    out = render.write(deployment_plan.build(inv), MAN, tmp_path / "run")
    written = (out / "hosts.yml").read_text() + (out / "group_vars" / "all.yml").read_text()
    assert password.read_text() not in written
    key = (state / "tls" / "demo" / "hosts" / "h1" / "server.key").read_text()
    assert "PRIVATE KEY" in key and "PRIVATE KEY" not in written
    assert yaml.safe_load((out / "hosts.yml").read_text())["all"]["hosts"]["h1"]["tls_key_src"]


def test_tls_off_is_plain_http_everywhere(tmp_path: Path) -> None:
    inv = load_inventory(_inv(tmp_path, 2, "tls: {mode: off}\n"))
    gv = render.group_vars(deployment_plan.build(inv), MAN)
    assert gv["pli_tls_enabled"] is False and gv["pli_gateway_scheme"] == "http"
    assert [e["url"] for e in gv["gateway_engines"]] == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    assert gv["gateway_redis_url"].startswith("redis://:")
    host = render.hosts_yaml(deployment_plan.build(inv))["all"]["hosts"]["h1"]
    assert host["engine_tls"] is False and "tls_key_src" not in host
    assert host["healthcheck_gateway_url"] == "http://127.0.0.1:8080"
