"""The engine role's clean-up of units that left the plan (tasks/configure.yml), evaluated by
Ansible as the role writes it: a retired canary's unit, or a model's that left a host, goes;
every unit the plan still has stays."""

from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from installer.inventory import Inventory, ServedModel
from installer.inventory.served import Model
from installer.planning import plan as deployment_plan
from tests.support import REPO
from tests.support.role_expression import evaluate

CONFIGURE = REPO / "playbooks" / "roles" / "engine" / "tasks" / "configure.yml"


def _stale(tmp: Path, on_host: list[str], instances: list[dict[str, Any]]) -> list[str]:
    """What the role's stale-unit expression gives for these unit files and these engines."""
    tasks = yaml.safe_load(CONFIGURE.read_text())
    (task,) = [t for t in tasks if t["name"] == "Remove engine units no longer in the layout"]
    found = {"files": [{"path": f"/etc/systemd/system/{u}"} for u in on_host]}
    return evaluate(tmp, task["vars"]["_engine_stale_units"],  # type: ignore[no-any-return]
                    {"_engine_instances": instances, "__engine_old_units": found})


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
