"""The release controller's unit, settings and scrape job as the monitoring role renders them
(#35): hardened like the role's other units, restarted whatever ended it, its settings JSON the
controller reads (the Redis URL, with the deployment certificate only for rediss://), and
Prometheus scraping it only when it runs."""

import json
from pathlib import Path

import jinja2
import yaml

from service.release_controller import _settings
from tests.support.monitoring_render import ROLE, inventory_vars, render, role_vars

HOST = {"pli_user": "private-llm", "pli_root": "/opt/private-llm", "pli_config_dir": "/etc/private-llm",
        "pli_tls_dir": "/etc/private-llm/tls"}


def test_the_unit_is_hardened_and_restarts_always() -> None:
    unit = render("release-controller.service.j2", **role_vars(**HOST))
    lines = set(unit.splitlines())
    assert ("ExecStart=/opt/private-llm/current/gateway-venv/bin/python -m service.release_controller "
            "--settings /etc/private-llm/release-controller.json") in lines
    for directive in ("Restart=always", "User=private-llm", "NoNewPrivileges=true", "ProtectSystem=strict",
                      "ProtectHome=true", "PrivateTmp=true", "PrivateDevices=true", "CapabilityBoundingSet=",
                      "LogsDirectory=private-llm-release", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX"):
        assert directive in lines, directive


def test_the_settings_are_what_the_controller_reads(tmp_path: Path) -> None:
    for url, tls in (("redis://:pw@127.0.0.1:6379/0", None),
                     ("rediss://:pw@10.0.0.1:6379/0", {"ca_file": "/etc/private-llm/tls/ca.pem",
                                                       "certfile": "/etc/private-llm/tls/server.pem",
                                                       "keyfile": "/etc/private-llm/tls/server.key"})):
        path = tmp_path / "s.json"
        path.write_text(_render_settings(url))
        s = _settings(path)
        assert s["redis_url"] == url and s["tls"] == tls
        assert s["prometheus_url"] == "http://127.0.0.1:9090" and s["metrics_address"] == "127.0.0.1"
        assert s["audit_log"] == "/var/log/private-llm-release/decisions.jsonl" and s["metrics_port"] == 9465


def _render_settings(url: str) -> str:
    """The template with Ansible's to_nice_json (plain Jinja2 has no such filter)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"), undefined=jinja2.StrictUndefined)
    env.filters["to_nice_json"] = lambda v: json.dumps(v, indent=4, sort_keys=True)
    return env.get_template("release-controller.json.j2").render(
        **role_vars(gateway_redis_url=url, **HOST))


def test_prometheus_scrapes_the_controller_only_when_it_runs() -> None:
    def jobs(**overrides: object) -> dict[str, dict]:
        config = yaml.safe_load(render("prometheus.yml.j2", **inventory_vars({"gw": "10.0.0.1"}, ["gw"],
                                                                           **overrides)))
        return {j["job_name"]: j for j in config["scrape_configs"]}

    assert "release-controller" not in jobs()  # off by default
    job = jobs(monitoring_release_controller=True)["release-controller"]
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9465"], "labels": {"host": "gw"}}]
