"""The engine role's host-torch tasks (engine.host_torch), run for real by Ansible on localhost.

Two real virtual environments stand in for the host's CUDA PyTorch environment and the
engine's: the host one holds a `torch` package of the shape the role reads (__version__,
version.cuda), since this machine has no CUDA torch.
"""

import os
import subprocess
import sys
from pathlib import Path

import ansible_runner
import yaml

from tests.support import REPO


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    out = subprocess.run(
        [str(path / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


def _host_env(tmp: Path, version: str, cuda: str | None) -> Path:
    site = _venv(tmp / "host")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f"__version__ = {version!r}\nfrom torch import version\n")
    (site / "torch" / "version.py").write_text(f"cuda = {cuda!r}\n")
    (site / "pli_probe.py").write_text("WHERE = 'host'\n")
    return tmp / "host"


def _run(tmp: Path, host: Path, version: str) -> tuple[int, str]:
    project = tmp / "project"
    project.mkdir()
    (tmp / "runner").mkdir()
    task = {"name": "Host torch", "ansible.builtin.include_role": {"name": "engine", "tasks_from": "host_torch"}}
    (project / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [task]}]))
    r = ansible_runner.run(
        private_data_dir=str(tmp / "runner"), project_dir=str(project), playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={
            "engine_host_torch": str(host), "engine_host_torch_version": version,
            "_engine_release_dir": str(tmp / "release"), "ansible_python_interpreter": sys.executable,
        },
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "True",
                 "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        quiet=True, suppress_env_files=True,
    )
    return r.rc, r.stdout.read()


def test_the_engine_venv_imports_torch_from_the_host_behind_its_own_packages(tmp_path: Path) -> None:
    host = _host_env(tmp_path, "2.11.0+cu130", "13.0")
    venv_site = _venv(tmp_path / "release" / "venv")
    (venv_site / "pli_probe.py").write_text("WHERE = 'venv'\n")  # a bundle pin of a package both have

    rc, out = _run(tmp_path, host, "2.11.0")
    assert rc == 0, out[-3000:]

    seen = subprocess.run(
        [str(tmp_path / "release" / "venv" / "bin" / "python"), "-c",
         "import torch, pli_probe; print(torch.__file__); print(pli_probe.WHERE)"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    assert seen[0].startswith(str(host)), seen
    assert seen[1] == "venv"  # the venv's own packages come first


def test_a_host_torch_of_another_version_or_without_cuda_is_refused_with_the_fix(tmp_path: Path) -> None:
    host = _host_env(tmp_path, "2.10.0+cpu", None)
    _venv(tmp_path / "release" / "venv")

    rc, out = _run(tmp_path, host, "2.11.0")
    assert rc != 0
    flat = " ".join(out.split())
    assert f"engine.host_torch {host}: it has torch 2.10.0+cpu with CUDA none (a CPU-only build)" in flat
    assert "the bundle's vLLM needs torch 2.11.0 built with CUDA" in flat
    assert "remove it so the bundle carries torch" in flat
