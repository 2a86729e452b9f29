"""The engine role's real preflight and unit/env/Ray templates, run by Ansible on localhost
(connection local, files written under a temp dir), for the variables the installer renders."""

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from installer.ansible import render
from installer.bundle.manifest import Manifest
from installer.planning.plan import DeploymentPlan
from tests.support import REPO

ROLE = REPO / "playbooks" / "roles" / "engine"
# What the unit runs before the plan's argv (templates/engine.service.j2).
EXEC_PREFIX = "/opt/private-llm/current/venv/bin/python /opt/private-llm/current/vllm_serve.py"


def render_role(tmp: Path, variables: dict[str, Any]) -> dict[str, str]:
    """{file name: text}: one unit per engine (named after its unit), engine.env, and ray,
    ray-firewall and ray.nft for a model spanning hosts."""
    out = tmp / "out"
    out.mkdir(parents=True)
    project = tmp / "project"
    project.mkdir()
    tasks: list[dict[str, Any]] = [
        {"name": "Engine preflight", "ansible.builtin.include_role": {
            "name": "engine", "tasks_from": "preflight", "public": True}},
        {"name": "Units", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "engine.service.j2"), "dest": f"{out}/{{{{ _engine_instance.unit }}}}"},
         "loop": "{{ _engine_instances }}", "loop_control": {"loop_var": "_engine_instance"}},
        {"name": "Env", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "engine.env.j2"), "dest": f"{out}/engine.env"}},
        {"name": "Ray", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "ray.service.j2"), "dest": f"{out}/ray"},
         "when": "engine_ray | length > 0"},
        {"name": "Ray firewall unit", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "ray-firewall.service.j2"), "dest": f"{out}/ray-firewall"},
         "when": "engine_ray | length > 0"},
        {"name": "Ray firewall rules", "ansible.builtin.copy": {
            "content": "{{ engine_ray.firewall }}", "dest": f"{out}/ray.nft"},
         "when": "engine_ray | length > 0"},
    ]
    (project / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    r = ansible_runner.run(
        private_data_dir=str(tmp), project_dir=str(project), playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={**variables, "ansible_python_interpreter": sys.executable},
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "True",
                 # ansible-runner starts ansible-playbook by name: this interpreter's first
                 "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        quiet=True, suppress_env_files=True,
    )
    assert r.rc == 0, r.stdout.read()[-3000:]
    return {p.name: p.read_text() for p in out.iterdir()}


def rendered_vars(plan: DeploymentPlan, host: str) -> dict[str, Any]:
    """What `up` hands the roles of `host`: group_vars/all.yml and its hosts.yml entry."""
    man = Manifest(target={}, components={}, packages=[])
    return {**render.group_vars(plan, man), **render.hosts_yaml(plan, man)["all"]["hosts"][host],
            "pli_bundle_dir": "/b", "pli_release_id": "r-1"}


def exec_argv(unit: str) -> list[str]:
    """The vLLM argv of a rendered unit's ExecStart, as systemd hands it over (%% and $$ undone)."""
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    command = line.removeprefix("ExecStart=")
    assert command.startswith(EXEC_PREFIX + " "), command
    return [a.replace("%%", "%").replace("$$", "$") for a in shlex.split(command.removeprefix(EXEC_PREFIX + " "))]
