"""The release controller's unit, settings and scrape job as the monitoring role renders them
(#35): hardened like the role's other units, restarted whatever ended it, its settings JSON the
controller reads (the Redis URL, with the deployment certificate only for rediss://), and
Prometheus scraping it only when it runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

from service.release_controller import settings_of
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
        s = settings_of(path)
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

    assert "release-controller" not in jobs(monitoring_release_controller=False)
    job = jobs()["release-controller"]  # on by default
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9465"], "labels": {"host": "gw"}}]


def test_ansible_renders_the_settings_with_the_password_from_its_file(tmp_path: Path) -> None:
    """The URL as installer/ansible/render.py gives it: a template that reads the password file,
    evaluated by Ansible into the 0600 settings (and nowhere else)."""
    password = tmp_path / "redis.password"
    password.write_text("s3cret-pw")
    out = tmp_path / "release-controller.json"
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False, "vars_files": [str(ROLE / "defaults" / "main.yml")],
        "tasks": [{"ansible.builtin.template": {"src": str(ROLE / "templates" / "release-controller.json.j2"),
                                                "dest": str(out), "mode": "0600"}, "no_log": True}],
    }]))
    url = "rediss://:{{ lookup('ansible.builtin.file', redis_password_file) }}@10.0.0.1:6379/0"
    variables = {**HOST, "monitoring_prometheus_port": 9090, "redis_password_file": str(password),
                 "gateway_redis_url": url}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'vars.json'}", str(play)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "s3cret-pw" not in proc.stdout + proc.stderr
    s = settings_of(out)
    assert s["redis_url"] == "rediss://:s3cret-pw@10.0.0.1:6379/0"
    assert s["tls"]["certfile"] == "/etc/private-llm/tls/server.pem"
    assert out.stat().st_mode & 0o777 == 0o600
