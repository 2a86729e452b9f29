"""The installer as users install it: the wheel `pip wheel .` builds, installed into a fresh venv
outside the checkout, must find its playbooks and Terraform modules and build the gateway wheel
from its installed files."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]

# Runs inside the fresh venv: where the installed code looks for its data, and the gateway wheel
# packed from the installed files (then again after one installed file was changed).
PROBE = """
import json, sys
from pathlib import Path
import installer, installer.base.paths as paths
from installer.bundle import project_wheel
from installer.base.errors import BundleError
from installer.terraform.tfvars import MODULES_DIR

dest = Path(sys.argv[1])
wheel = project_wheel.build(dest)
digest = project_wheel.source_digest()
engine_defaults = paths.role_defaults("engine")
service_init = Path(__import__("service").__file__)
service_init.write_text(service_init.read_text() + "# changed after the install\\n")
try:
    project_wheel.build(dest / "again")
    refused = None
except BundleError as exc:
    refused = str(exc) + " " + " ".join(exc.details)
print(json.dumps({
    "installer": installer.__file__, "checkout": str(paths.CHECKOUT), "playbooks": str(paths.PLAYBOOKS_DIR),
    "modules": str(MODULES_DIR), "wheel": str(wheel), "digest": digest,
    "engine_defaults": sorted(engine_defaults), "refused": refused,
}))
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _source_copy(dest: Path) -> Path:
    """The project as git would hand it out: a build in the checkout itself would reuse (and race
    other builds on) its build/ folder."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO).stdout
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    return dest


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _wheel_members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist() if not n.endswith(".dist-info/RECORD")}


def _record_ok(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (record_name,) = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
        rows = [line.split(",") for line in zf.read(record_name).decode().splitlines()]
        listed = {name for name, *_ in rows}
        assert listed == set(zf.namelist()), "RECORD must list every member, and only those"
        for name, hash_, size in rows:
            if name == record_name:
                continue
            data = zf.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (hash_, int(size)) == (f"sha256={digest}", len(data)), name


def test_built_wheel_works_outside_the_checkout(tmp_path: Path) -> None:
    src = _source_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)], src)
    (wheel,) = dist.glob("private_llm_installer-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp_path,
    )
    # The dependencies come from this venv's site-packages as a plain path: its editable-install
    # hook (a .pth of its own) is not run, so the checkout is not importable from the fresh venv.
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip()
    ).resolve()
    (site / "deps-from-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "work"
    (work / "model").mkdir(parents=True)
    (work / "model" / "config.json").write_text("{}")
    (work / "id_ed25519").write_text("not read by validate\n")
    example = (REPO / "inventory" / "baremetal.example.yml").read_text()
    assert "~/.ssh/id_ed25519" in example and "models/deepseek-r1-distill-qwen-7b" in example
    (work / "inventory.yml").write_text(
        example.replace("~/.ssh/id_ed25519", "id_ed25519").replace("models/deepseek-r1-distill-qwen-7b", "model")
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["INSTALLER_CACHE_DIR"] = str(tmp_path / "cache")

    validate = _run([str(venv / "bin" / "installer"), "validate", "-i", "inventory.yml"], work, env)
    assert validate.stdout.startswith("OK inventory.yml"), validate.stdout
    assert "Usage" in _run([str(venv / "bin" / "installer"), "bundle", "build", "--help"], work, env).stdout

    out = json.loads(_run([str(python), "-c", PROBE, str(tmp_path / "gateway")], work, env).stdout)
    assert Path(out["installer"]).is_relative_to(site), f"the checkout leaked in: {out['installer']}"
    assert out["checkout"] == "None"
    playbooks, modules = Path(out["playbooks"]), Path(out["modules"])
    assert playbooks == site / "installer" / "_data" / "playbooks"
    assert modules == site / "installer" / "_data" / "terraform"
    assert "engine_limit_nofile" in out["engine_defaults"]

    # Every file of playbooks/ and terraform/modules/, and nothing else, is in the installed copy.
    assert _files(playbooks) == _files(src / "playbooks")
    assert _files(modules) == _files(src / "terraform" / "modules")
    assert (playbooks / "site.yml").is_file()
    roles = [p.name for p in (src / "playbooks" / "roles").iterdir()]
    assert roles and all((playbooks / "roles" / r / "tasks" / "main.yml").is_file() for r in roles)
    providers = [p.name for p in (src / "terraform" / "modules").iterdir()]
    assert providers and all((modules / p / "main.tf").is_file() for p in providers)

    # The gateway wheel packed from the installed files is the wheel pip built, member for member.
    gateway = Path(out["wheel"])
    assert gateway.name == wheel.name
    assert _wheel_members(gateway) == _wheel_members(wheel)
    _record_ok(gateway)
    assert len(out["digest"]) == 64
    assert out["refused"] and "service/__init__.py" in out["refused"], out["refused"]
