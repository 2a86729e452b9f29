"""The gateway role's gateway.yml, rendered as Ansible renders it (the role's defaults under the
variables given, its filters, undefined variables an error), and the small inventory the tests
that render it start from."""

import json
from pathlib import Path
from typing import Any

import jinja2
import yaml

from installer.inventory import Inventory
from tests.support import REPO

ROLE = REPO / "playbooks" / "roles" / "gateway"


def gateway_config(variables: dict[str, Any]) -> dict[str, Any]:
    """gateway.yml as a mapping; `variables` over the role's defaults."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"), trim_blocks=True, undefined=jinja2.StrictUndefined
    )
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = bool
    env.filters["float"] = float
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    config: dict[str, Any] = yaml.safe_load(
        env.get_template("gateway.yml.j2").render({**defaults, "ansible_managed": "test", **variables})
    )
    return config


def one_host(tmp: Path, **sections: Any) -> Inventory:
    """Host h1 serving model `tiny` (an empty config.json in tmp/w) on the CPU, with `sections`."""
    (tmp / "w").mkdir(exist_ok=True)
    (tmp / "w" / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo", "hosts": [{"name": "h1", "address": "10.0.0.1"}], "engine": {"device": "cpu"},
        "model": {"path": str(tmp / "w"), "served_name": "tiny"}, **sections,
    })
