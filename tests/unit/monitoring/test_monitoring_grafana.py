"""Grafana provisioning as the role writes it when a host has Grafana (/etc/grafana/provisioning):
the datasource and dashboard-provider files, rendered from the role's templates, have the shape
Grafana's provisioning reads (apiVersion 1, datasources / providers), the dashboards point at
that datasource's uid, and the provider's folder is where the role copies the dashboards.

Never run against a real Grafana: no Grafana server build is installable here (not in Debian 12;
Grafana's own code is AGPL and ruled out for this project; PyPI/npm carry clients only), so this
checks the files, not Grafana's reading of them."""

import json
from pathlib import Path

import yaml

from tests.support.monitoring_render import ROLE, render, role_vars

TASKS = {t["name"]: t for t in yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())}


def test_the_datasource_is_the_local_prometheus_with_the_dashboards_uid() -> None:
    doc = yaml.safe_load(render("grafana-datasource.yml.j2", **role_vars(monitoring_prometheus_port=9191)))
    assert doc["apiVersion"] == 1
    (ds,) = doc["datasources"]
    assert ds["type"] == "prometheus" and ds["access"] == "proxy" and ds["url"] == "http://127.0.0.1:9191"
    uids = set()
    for path in (ROLE / "files" / "dashboards").glob("*.json"):
        def walk(node: object) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("datasource"), dict):
                    uids.add(node["datasource"]["uid"])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(json.loads(path.read_text()))
    assert uids == {ds["uid"]}


def test_the_dashboard_provider_reads_the_folder_the_dashboards_are_copied_to() -> None:
    doc = yaml.safe_load(render("grafana-dashboards.yml.j2", **role_vars()))
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["type"] == "file" and provider["allowUiUpdates"] is False
    copy = TASKS["Copy the dashboards"]["ansible.builtin.copy"]
    assert copy["src"] == "dashboards/" and copy["dest"].rstrip("/") == provider["options"]["path"]


def test_provisioning_is_written_only_where_grafana_is_and_into_its_layout() -> None:
    look = TASKS["Look for Grafana"]["ansible.builtin.stat"]
    assert look["path"] == "{{ monitoring_grafana_dir }}/provisioning"
    for name, kind in (("Provision Grafana's Prometheus datasource", "datasources"),
                       ("Provision Grafana's dashboard folder", "dashboards")):
        task = TASKS[name]
        assert task["when"] == "__monitoring_grafana.stat.exists"
        dest = task["ansible.builtin.template"]["dest"]
        assert dest == "{{ monitoring_grafana_dir }}/provisioning/" + kind + "/private-llm.yml"
        assert task["notify"] == "Restart Grafana"
    assert TASKS["Copy the dashboards"]["when"] == "__monitoring_grafana.stat.exists"
    handlers = {h["name"]: h for h in yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())}
    assert handlers["Restart Grafana"]["ansible.builtin.systemd_service"]["name"] == "grafana-server"


def test_the_role_passes_ansibles_syntax_check(tmp_path: Path) -> None:
    import subprocess
    import sys

    playbook = tmp_path / "p.yml"
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  roles: [monitoring]\n")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check", "-i", "localhost,", str(playbook)],
        capture_output=True, text=True, timeout=120, check=False,
        env={"ANSIBLE_ROLES_PATH": str(ROLE.parent), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
