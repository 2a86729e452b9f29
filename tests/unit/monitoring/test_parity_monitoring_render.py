"""tests/support/monitoring_render.py renders the monitoring role's templates without Ansible, with
the role's defaults and vars plus what it assumes the role derives (scrape scheme, CA file,
`for:` durations, interval, GPU exporter). Those assumptions are a copy kept on purpose, so
the many monitoring tests stay fast; this test keeps the copy honest.

Real Ansible (connection local) runs the role's own preflight, then renders the templates the
tests use, with the role's defaults and vars, the installer's host layout and the same small
inventory; the helper renders them from the same inputs. Facts and files must be identical, for
an http deployment on the production profile and an https one on the test profile."""

import json
import re
import sys
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

from installer.inventory.topology import HOST_LAYOUT
from tests.support import REPO
from tests.support.monitoring_render import ROLE, inventory_vars, render, role_vars

TEMPLATES = ["prometheus.yml.j2", "alerts.yml.j2", "alertmanager.yml.j2", "grafana-datasource.yml.j2",
             "grafana-dashboards.yml.j2"]
SERVING = {"gpu1": "10.0.0.11", "gpu2": "fd00::12"}
MONITORING = ["gpu1"]
ENGINES = {"gpu1": ["gpu1"], "gpu2": ["gpu2", "gpu2-1"]}
MANAGED = "managed by a test"  # the helper's ansible_managed; ansible.cfg says the same below
# What each play differs in, as the installer's group vars would say it.
CASES: dict[str, dict[str, Any]] = {
    "production-http": {"monitoring_alert_profile": "production", "pli_gateway_scheme": "http"},
    "test-https": {
        "monitoring_alert_profile": "test", "pli_gateway_scheme": "https",
        "monitoring_webhook_url": "https://hooks.example.internal/alerts", "monitoring_prometheus_port": 9191,
    },
}
# Rendered by the template module as well: the most Jinja (macros, loops, conditionals), and raw
# blocks at the end of the file (where trailing newlines are Ansible's own business).
MODULE_RENDERED = ["prometheus.yml.j2", "alerts.yml.j2"]
FIRST = next(iter(CASES))
# Defaults the helper hands over unevaluated: no test template reads them through the helper.
UNEVALUATED = {"monitoring_tarball_prefix"}


def _play(name: str, settings: dict[str, Any], out: Path, first: bool) -> dict[str, Any]:
    paths = [str(ROLE / "templates" / t) for t in TEMPLATES]
    return {
        "name": name,
        "hosts": "monitoring",
        "gather_facts": False,
        "vars": settings,
        "tasks": [
            {"name": "Derive as the role does", "ansible.builtin.include_role": {
                "name": "monitoring", "tasks_from": "preflight", "public": True}},
            # Ansible's templating on the controller, all templates in one task: a template task
            # per file would start a module process each, for what the lookup renders alike.
            {"name": "Report", "ansible.builtin.debug": {"msg": (
                "{{ {'facts': dict(__keys | zip(query('ansible.builtin.vars', *__keys))),"
                " 'rendered': dict(__templates | zip(query('ansible.builtin.template', *__paths)))} | to_json }}"
            )}, "vars": {"__keys": sorted(role_vars()), "__templates": TEMPLATES, "__paths": paths}},
            # Two files through the template module, as the role writes them, to hold the lookup
            # to it (once: it does not depend on the case).
            *[{"name": f"Render {t} as the role does", "ansible.builtin.template": {
                "src": str(ROLE / "templates" / t), "dest": str(out / t), "mode": "0600"}}
              for t in (MODULE_RENDERED if first else [])],
        ],
    }


def _run_ansible(tmp: Path) -> dict[str, dict[str, Any]]:
    """Run both plays; per play, what the role holds after its preflight and what it renders."""
    hosts = {h: {"ansible_host": a} for h, a in SERVING.items()}
    inventory = {"all": {
        "vars": {
            **HOST_LAYOUT, "gateway_port": 8080, "pli_deployment": "prod-a", "monitoring_engines": ENGINES,
            "engine_device": "cpu", "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        },
        "children": {"serving": {"hosts": hosts}, "monitoring": {"hosts": {h: {} for h in MONITORING}}},
    }}
    (tmp / "out").mkdir()
    project = tmp / "project"
    project.mkdir()
    (project / "play.yml").write_text(yaml.safe_dump([_play(n, s, tmp / "out", n == FIRST) for n, s in CASES.items()]))
    (tmp / "ansible.cfg").write_text(f"[defaults]\nansible_managed = {MANAGED}\n")
    reports: dict[str, dict[str, Any]] = {}

    def handle(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == "Report":
            reports[data["play"]] = json.loads(data["res"]["msg"])
        return True

    r = ansible_runner.run(
        private_data_dir=str(tmp), project_dir=str(project), playbook="play.yml",
        inventory=yaml.safe_dump(inventory), event_handler=handle, quiet=True, suppress_env_files=True,
        envvars={
            "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"),
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "ANSIBLE_NOCOLOR": "True",
            "ANSIBLE_PIPELINING": "True",
        },
    )
    assert r.status == "successful", r.stdout.read()[-4000:]
    assert sorted(reports) == sorted(CASES)
    for template in MODULE_RENDERED:
        assert reports[FIRST]["rendered"][template] == (tmp / "out" / template).read_text(), template
    return reports


@pytest.fixture(scope="module")
def ansible_side(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _run_ansible(tmp_path_factory.mktemp("monitoring-parity"))


def _helper_vars(settings: dict[str, Any]) -> dict[str, Any]:
    profile = settings["monitoring_alert_profile"]
    others = {k: v for k, v in settings.items() if k != "monitoring_alert_profile"}
    variables = inventory_vars(SERVING, MONITORING, profile=profile, **others)
    variables["monitoring_engines"] = ENGINES
    return variables


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_helpers_facts_are_the_roles(case: str, ansible_side: dict[str, dict[str, Any]]) -> None:
    helper = _helper_vars(CASES[case])
    role = ansible_side[case]["facts"]
    unevaluated = {k for k, v in role_vars().items() if isinstance(v, str) and "{{" in v}
    assert unevaluated == UNEVALUATED, "a new templated default: evaluate it in monitoring_render.role_vars"
    differ = {k: (helper[k], role[k]) for k in role if k not in UNEVALUATED and helper[k] != role[k]}
    assert not differ, f"monitoring_render assumes (left) what the role does not (right): {differ}"


def test_every_fact_the_preflight_derives_for_the_templates_is_in_the_helper() -> None:
    (derive,) = [t for t in yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
                 if "ansible.builtin.set_fact" in t]
    facts = set(derive["ansible.builtin.set_fact"])
    text = "\n".join(p.read_text() for p in (ROLE / "templates").glob("*.j2"))
    used = {f for f in facts if re.search(rf"\b{f}\b", text)}
    assert used >= {"_monitoring_scheme", "_monitoring_ca_file", "_monitoring_for", "_monitoring_interval"}
    assert used <= set(role_vars()), f"monitoring_render.role_vars does not derive {used - set(role_vars())}"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("template", TEMPLATES)
def test_the_helper_renders_what_ansible_renders(
    case: str, template: str, ansible_side: dict[str, dict[str, Any]]
) -> None:
    assert render(template, **_helper_vars(CASES[case])) == ansible_side[case]["rendered"][template]
