"""The engine's and the gateway's virtual environments come from one task file,
playbooks/roles/common/tasks/venv.yml (#34), run here for real: Ansible (connection local) with
the bundle's uv, offline, from a wheel made here. A second run changes nothing (the caller's
marker), and bytecode is compiled only when asked (the gateway's)."""

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ansible_runner
import pytest
import yaml

from installer.base.paths import cache_dir
from tests.support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROLES = REPO / "playbooks" / "roles"


def _uv() -> Path:
    """PLI_UV, else the uv of the newest bundle built on this machine (the lab's e2e builds one)."""
    given = os.environ.get("PLI_UV")
    if given:
        return Path(given)
    built = sorted((cache_dir() / "bundles").glob("*/tools/uv"), key=lambda p: p.stat().st_mtime)
    if not built:
        pytest.skip("no uv: set PLI_UV or build a bundle first (`installer bundle build`; the lab's e2e builds one)")
    return built[-1]


def _wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, with a RECORD installers check."""
    files = {
        "pli_venv_probe/__init__.py": b"VALUE = 7\n",
        "pli_venv_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pli-venv-probe\nVersion: 1.0\n",
        "pli_venv_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ] + ["pli_venv_probe-1.0.dist-info/RECORD,,"]
    files["pli_venv_probe-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / "pli_venv_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


# the two ways the roles include it: the engine's venv without bytecode, the gateway's with
VARIANTS = {"engine": False, "gateway": True}


def _play(tmp: Path, uv: Path) -> dict:
    """Run the shared task as the roles include it, for both variants in one play (a release
    folder each); return Ansible's per-host stats."""
    bundle = tmp / "bundle"
    (bundle / "tools").mkdir(parents=True, exist_ok=True)
    (bundle / "wheels").mkdir(exist_ok=True)
    if not (bundle / "tools" / "uv").exists():
        (bundle / "tools" / "uv").symlink_to(uv)
    wheel = _wheel(bundle / "wheels")
    (bundle / "probe-wheels.txt").write_text(f"wheels/{wheel.name}\n")
    project = tmp / "project"
    project.mkdir(exist_ok=True)
    tasks: list[dict] = []
    for name, compile_bytecode in VARIANTS.items():
        release = tmp / name
        tasks.append({
            "name": f"The shared venv task ({name})",
            "ansible.builtin.include_role": {"name": "common", "tasks_from": "venv.yml"},
            "vars": {
                "common_venv_for": name, "common_venv_uv": "tools/uv", "common_venv_python": sys.executable,
                "common_venv_dir": str(release / "venv"), "common_venv_wheels_file": "probe-wheels.txt",
                "common_venv_installed": str(release / ".installed"),
                "common_venv_compile_bytecode": compile_bytecode,
            },
        })
        tasks.append({"name": f"The caller's marker ({name})",
                      "ansible.builtin.copy": {"content": "1\n", "dest": str(release / ".installed")}})
    (project / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    r = ansible_runner.run(
        private_data_dir=str(tmp), project_dir=str(project), playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={"pli_bundle_dir": str(bundle), "pli_state_dir": str(tmp / "state"),
                   "ansible_python_interpreter": sys.executable},
        envvars={"ANSIBLE_ROLES_PATH": str(ROLES), "ANSIBLE_NOCOLOR": "True",
                 # ansible-runner starts ansible-playbook by name: this interpreter's first
                 "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        quiet=True, suppress_env_files=True,
    )
    assert r.status == "successful", r.stdout.read()
    return r.stats


def test_the_shared_venv_task_installs_the_bundles_wheels_offline_once(tmp_path: Path) -> None:
    uv = _uv()
    first = _play(tmp_path, uv)
    assert first["changed"]["localhost"] == 3 * len(VARIANTS)  # venv, wheels, marker
    for name, compile_bytecode in VARIANTS.items():
        venv = tmp_path / name / "venv"
        probe = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import pli_venv_probe; print(pli_venv_probe.VALUE)"],
            capture_output=True, text=True, timeout=60, check=True,
        )
        assert probe.stdout.strip() == "7"
        site = next((venv / "lib").glob("python3*/site-packages/pli_venv_probe"))
        compiled = list((site / "__pycache__").glob("*.pyc")) if (site / "__pycache__").is_dir() else []
        assert bool(compiled) is compile_bytecode, name
    again = _play(tmp_path, uv)
    assert again["changed"].get("localhost", 0) == 0


def test_the_engine_and_the_gateway_make_their_venvs_only_through_it() -> None:
    """Neither role runs uv itself: the venv commands live in common/tasks/venv.yml alone."""
    for role in ("engine", "gateway"):
        install = yaml.safe_load((ROLES / role / "tasks" / "install.yml").read_text())
        included = [t for t in install if "ansible.builtin.include_role" in t]
        assert [t["ansible.builtin.include_role"]["tasks_from"] for t in included if
                t["ansible.builtin.include_role"]["name"] == "common"] == ["venv.yml"]
        assert not any("ansible.builtin.command" in t and "venv" in str(t["ansible.builtin.command"]) for t in install)
