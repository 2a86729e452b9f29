"""Which engines the engine role restarts (handlers/main.yml), evaluated by Ansible as the role
has it: a canary's unit appearing, or a model's weights changing, restarts only those engines,
never stable's; a new release or engine.env restarts every one."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO
from tests.support.role_expression import evaluate

HANDLERS = REPO / "playbooks" / "roles" / "engine" / "handlers" / "main.yml"
INSTANCES = [
    {"unit": "private-llm-engine", "model_dir": "chat"},
    {"unit": "private-llm-engine-emb", "model_dir": "emb"},
    {"unit": "private-llm-engine-emb-canary", "model_dir": "emb.canary"},
]


def _restarted(tmp: Path, facts: dict[str, Any]) -> list[str]:
    (handler,) = [h for h in yaml.safe_load(HANDLERS.read_text()) if h["name"] == "Restart engine"]
    return evaluate(tmp, handler["loop"], {"_engine_instances": INSTANCES, **facts},  # type: ignore[no-any-return]
                    named=handler["vars"])


def _units(*changed: str) -> dict[str, Any]:
    """What the unit-writing task registers: one result per engine, changed or not."""
    return {"__engine_units": {"results": [
        {"changed": i["unit"] in changed, "_engine_instance": i} for i in INSTANCES]}}


@pytest.mark.parametrize(("facts", "restarted"), [
    # a canary starting: its unit is new, its weights folder too; stable stays up
    ({**_units("private-llm-engine-emb-canary"), "model_changed_dirs": ["emb.canary"]},
     ["private-llm-engine-emb-canary"]),
    # new weights of one model: its engines only
    ({**_units(), "model_changed_dirs": ["emb"]}, ["private-llm-engine-emb"]),
    # a new release or engine.env: every engine
    ({**_units(), "model_changed_dirs": [], "__engine_restart_all": True},
     [i["unit"] for i in INSTANCES]),
    # an earlier model role, which names no folders: every engine, as before
    ({**_units()}, [i["unit"] for i in INSTANCES]),
])
def test_only_engines_whose_unit_or_weights_changed_restart(
    tmp_path: Path, facts: dict[str, Any], restarted: list[str]
) -> None:
    assert sorted(_restarted(tmp_path, facts)) == sorted(restarted)
