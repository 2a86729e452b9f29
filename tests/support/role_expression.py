"""Evaluate a Jinja expression of a role's YAML with Ansible itself (localhost, no host touched),
so a test checks the expression the role runs rather than a copy of it."""

import json
import os
import sys
from pathlib import Path
from typing import Any

import ansible_runner
import yaml


def evaluate(tmp: Path, expression: str, variables: dict[str, Any], named: dict[str, str] | None = None) -> Any:
    """The value of `expression` ("{{ ... }}") with `variables` as extra vars and `named` as
    task vars (expressions that it refers to, as a role's task `vars:` define them)."""
    project = tmp / "project"
    project.mkdir(parents=True)
    out = tmp / "out.json"
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.copy": {"content": "{{ _value | to_json }}", "dest": str(out)},
         "vars": {**(named or {}), "_value": expression}},
    ]}]
    (project / "play.yml").write_text(yaml.safe_dump(play))
    r = ansible_runner.run(
        private_data_dir=str(tmp), project_dir=str(project), playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={"ansible_python_interpreter": sys.executable, **variables},
        envvars={"ANSIBLE_NOCOLOR": "True", "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        quiet=True, suppress_env_files=True,
    )
    assert r.rc == 0, r.stdout.read()[-3000:]
    return json.loads(out.read_text())
