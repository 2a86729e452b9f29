"""Roles run for real on this machine (ansible-playbook through ansible-runner, connection local),
with a fake `nvidia-smi` on PATH printing captured output (tests/unit/fixtures/gpu) when asked."""

import os
import sys
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from tests.support import REPO

FIXTURES = REPO / "tests" / "unit" / "fixtures" / "gpu"


def play(
    tmp: Path,
    *,
    device: str,
    roles: list[str],
    smi: str | None = None,
    check: bool = False,
    **extra: Any,
) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    """Run the roles on localhost; return (runner, stats, task results)."""
    # ansible-runner starts ansible-playbook by name: this interpreter's tools first
    env_path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    if smi:
        bin_dir = tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        fake = bin_dir / "nvidia-smi"
        fake.write_text(
            f'#!/bin/sh\ncase "$*" in *--query-gpu*) cat {FIXTURES / smi / "query.csv"};;'
            f" *) cat {FIXTURES / smi / 'q.txt'};; esac\n"
        )
        fake.chmod(0o755)
        env_path = f"{bin_dir}:{env_path}"
    project = tmp / "project"
    project.mkdir(exist_ok=True)
    (project / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "GPU roles",
                    "hosts": "all",
                    "gather_facts": True,
                    "gather_subset": ["min"],
                    "roles": roles,
                }
            ]
        )
    )
    results: list[dict[str, Any]] = []

    def handle(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped"):
            results.append(
                {"task": data.get("task"), "event": event["event"], "res": data.get("res", {})}
            )
        return True

    r = ansible_runner.run(
        private_data_dir=str(tmp),
        project_dir=str(project),
        playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={
            "engine_device": device,
            "pli_bundle_dir": str(tmp / "bundle"),
            "pli_state_dir": str(tmp / "state"),
            "pli_root": str(tmp / "root"),
            "ansible_python_interpreter": sys.executable,
            **extra,
        },
        envvars={
            "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
            "PATH": env_path,
            "ANSIBLE_NOCOLOR": "True",
        },
        cmdline="--check" if check else None,
        event_handler=handle,
        quiet=True,
        suppress_env_files=True,
    )
    return r, r.stats or {}, results


def msgs(results: list[dict[str, Any]]) -> str:
    return "\n".join(str(x["res"].get("msg", "")) for x in results)


def local_project(tmp: Path, play_text: str, name: str, cfg: str = "[defaults]\n") -> tuple[Path, Path]:
    """A playbooks folder holding `name` and an inventory of one local host, for run_playbook."""
    playbooks = tmp / "playbooks"
    playbooks.mkdir()
    (playbooks / name).write_text(play_text)
    (playbooks / "ansible.cfg").write_text(cfg)
    inventory = tmp / "inventory"
    inventory.mkdir()
    (inventory / "hosts").write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return playbooks, inventory
