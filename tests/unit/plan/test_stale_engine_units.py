"""The engine role's clean-up of units that left the plan (tasks/configure.yml), evaluated by
Ansible as the role writes it: a retired canary's unit, or a model's that left a host, goes;
every unit the plan still has stays."""

import json
import os
import sys
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from installer import plan as deployment_plan
from installer.inventory import Inventory, ServedModel
from installer.inventory.models import Model
from tests.support import REPO

CONFIGURE = REPO / "playbooks" / "roles" / "engine" / "tasks" / "configure.yml"


def _stale(tmp: Path, on_host: list[str], instances: list[dict[str, Any]]) -> list[str]:
    """What the role's stale-unit expression gives for these unit files and these engines."""
    tasks = yaml.safe_load(CONFIGURE.read_text())
    (task,) = [t for t in tasks if t["name"] == "Remove engine units no longer in the layout"]
    expression = task["vars"]["_engine_stale_units"]
    project = tmp / "project"
    project.mkdir(parents=True)
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.copy": {"content": "{{ _engine_stale_units | to_json }}", "dest": str(tmp / "out.json")},
         "vars": {"_engine_stale_units": expression}},
    ]}]
    (project / "play.yml").write_text(yaml.safe_dump(play))
    r = ansible_runner.run(
        private_data_dir=str(tmp), project_dir=str(project), playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={"ansible_python_interpreter": sys.executable, "_engine_instances": instances,
                   "__engine_old_units": {"files": [{"path": f"/etc/systemd/system/{u}"} for u in on_host]}},
        envvars={"ANSIBLE_NOCOLOR": "True", "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        quiet=True, suppress_env_files=True,
    )
    assert r.rc == 0, r.stdout.read()[-3000:]
    return json.loads((tmp / "out.json").read_text())  # type: ignore[no-any-return]


def _inventory(tmp: Path) -> Inventory:
    for name in ("chat", "emb", "emb2"):
        (tmp / name).mkdir(exist_ok=True)
        (tmp / name / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo",
        "hosts": [{"name": "h1", "address": "10.0.0.1"}],
        "engine": {"device": "cpu"},
        "models": [
            {"name": "chat", "served_name": "chat", "path": str(tmp / "chat")},
            {"name": "emb", "served_name": "emb", "path": str(tmp / "emb"), "task": "embed"},
        ],
    })


def _found_by_the_role(units: list[str]) -> list[str]:
    """The unit files the role's find task sees among these (its pattern, as the role has it)."""
    tasks = yaml.safe_load(CONFIGURE.read_text())
    (find,) = [t for t in tasks if t["name"] == "Find engine units of an earlier layout"]
    pattern = find["ansible.builtin.find"]["patterns"].replace("{{ engine_unit_name }}", "private-llm-engine")
    return [u for u in units if fnmatch(u, pattern)]


def test_a_retired_canary_unit_is_removed_and_the_rest_stay(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    emb = inv.served_models()[1]
    canary = ServedModel("emb", Model(path=tmp_path / "emb2", served_name="emb"), "embed", emb.engine, emb.hosts)
    during = deployment_plan.build(inv, {"emb": canary}).host("h1").engines
    after = deployment_plan.build(inv).host("h1").engines
    on_host = [f"{e.unit}.service" for e in during]
    assert on_host == ["private-llm-engine.service", "private-llm-engine-emb.service",
                       "private-llm-engine-emb-canary.service"]
    old = _found_by_the_role(on_host)
    assert _stale(tmp_path / "after", old, [e.as_vars() for e in after]) == ["private-llm-engine-emb-canary.service"]
    # while the release runs, nothing of it is stale
    assert _stale(tmp_path / "during", old, [e.as_vars() for e in during]) == []
