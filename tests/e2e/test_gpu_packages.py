"""The GPU roles' package mechanics on a real host over SSH: a local apt repository pushed like
the bundle, the driver branch chosen from the matrix and pinned, every package held, a branch
upgrade (R550 -> R570) that replaces held packages, and a second run that changes nothing.

What this does NOT test: loading a driver. Lab hosts are containers without a GPU or a kernel of
their own, so the packages below are real .deb files with NVIDIA's package names, versions and
relationships (Ubuntu's server driver names, which the roles install) but empty payloads, and
`nvidia_driver_assume_gpus` (a package-test-only role variable) makes the probe report two
Hopper GPUs and take the "running" driver's version from the installed driver package.

Runs on the first host of the shared e2e lab and leaves it as it found it (everything below
/var/tmp/pli-gpu-package-test, the packages purged, holds and the blacklist file removed).
"""

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from installer.ansible import render
from installer.ansible.runner import PlaybookResult, run_playbook
from installer.base.paths import PLAYBOOKS_DIR
from installer.bundle.manifest import CHECKSUMS, MANIFEST, Manifest, scan
from installer.bundle.push import push_one
from installer.gpu import matrix
from installer.hosts.ssh import Target, target
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from tests.support.gpu_debs import ASSUMED, BRANCHES, build_repo

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TEST_DIR = "/var/tmp/pli-gpu-package-test"
GPU_ROLES = ["nvidia_driver", "cuda", "nccl", "fabricmanager"]


def bundle_of(root: Path) -> Manifest:
    """A minimal bundle (the repository under debs/) with the manifest the push checks against."""
    man = Manifest({"os": "debian-12"}, {}, [], scan(root))
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    return man


def host_sh(t: Target, command: str) -> str:
    proc = subprocess.run(t.ssh_argv(command), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{command}: {proc.stderr}"
    return proc.stdout


def packages(t: Target) -> dict[str, str]:
    """{package: version} of what dpkg has installed among the GPU stack's names."""
    out = host_sh(t, "dpkg-query -W -f='${db:Status-Abbrev}|${Package}|${Version}\\n' "
                     "'nvidia-*' 'libnvidia-*' 'libnccl*' 'cuda-*' 2>/dev/null || true")
    # status "ii" installed, "hi" installed and held
    return {p: v for s, p, v in (line.split("|") for line in out.splitlines()) if s[1:2] == "i"}


def holds(t: Target) -> set[str]:
    return set(host_sh(t, "apt-mark showhold").split())


@dataclass
class Lab:
    target: Target
    tmp: Path
    runs: list[tuple[str, PlaybookResult, dict[str, str], set[str]]] = field(default_factory=list)

    def play(self, label: str, branch: int) -> PlaybookResult:
        """Run the GPU roles for the CUDA version of `branch`, pinned to it; keep what dpkg says."""
        cuda = BRANCHES[branch]["cuda"]
        inv_dir = self.tmp / f"inv-{label}"
        (inv_dir / "group_vars").mkdir(parents=True)
        hosts = render.hosts_yaml(deployment_plan.build(load_inventory(self.inventory)))
        hosts["all"]["hosts"] = {self.target.name: hosts["all"]["hosts"][self.target.name]}
        hosts["all"]["children"] = {}
        (inv_dir / "hosts.yml").write_text(yaml.safe_dump(hosts))
        gvars: dict[str, Any] = {
            "engine_device": "gpu",
            "pli_bundle_dir": f"{TEST_DIR}/bundle",
            "pli_state_dir": f"{TEST_DIR}/state",
            "pli_root": f"{TEST_DIR}/root",
            **matrix.group_vars(cuda, pin=branch),
            "nvidia_driver_assume_gpus": {**ASSUMED, "cuda_driver_version": cuda},
        }
        (inv_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump(gvars))
        result = run_playbook("gpu_packages.yml", inv_dir, self.tmp / f"run-{label}", playbooks_dir=self.project)
        self.runs.append((label, result, packages(self.target), holds(self.target)))
        return result

    @property
    def inventory(self) -> Path:
        return self._inventory

    def setup(self, inventory: Path) -> None:
        self._inventory = inventory
        self.project = self.tmp / "project"
        self.project.mkdir()
        (self.project / "roles").symlink_to(PLAYBOOKS_DIR / "roles")
        shutil.copy(PLAYBOOKS_DIR / "ansible.cfg", self.project / "ansible.cfg")
        (self.project / "gpu_packages.yml").write_text(yaml.safe_dump([{
            "name": "GPU roles, package mechanics", "hosts": "all", "become": True,
            "gather_facts": True, "gather_subset": ["min"], "roles": GPU_ROLES,
        }]))


CLEANUP = f"""
systemctl disable --now nvidia-fabricmanager.service >/dev/null 2>&1 || true
names=$(dpkg-query -W -f='${{Package}}\\n' 'nvidia-*' 'libnvidia-*' 'libnccl*' 'cuda-toolkit-*' 2>/dev/null)
[ -z "$names" ] || {{ apt-mark unhold $names >/dev/null; dpkg --purge $names >/dev/null; }}
systemctl daemon-reload
rm -rf {TEST_DIR} /etc/modprobe.d/private-llm-blacklist-nouveau.conf
"""


@pytest.fixture(scope="module")
def lab(lab_hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    inv = load_inventory(lab_hosts.inventory_path)
    t = target(inv, inv.hosts[0])
    # The shared lab hosts carry no GPU packages: a leftover would make these checks meaningless.
    assert packages(t) == {}, "the lab host already has GPU packages"
    here = Lab(t, tmp_path_factory.mktemp("gpu-packages"))
    here.setup(lab_hosts.inventory_path)
    bundle = here.tmp / "bundle"
    build_repo(bundle / "debs")
    push_one(t, bundle, bundle_of(bundle), lambda *_: None, dest=f"{TEST_DIR}/bundle")
    try:
        yield here
    finally:
        host_sh(t, CLEANUP)
        assert packages(t) == {} and not holds(t), "cleanup left GPU packages on the shared lab host"


def _run(lab: Lab, label: str) -> tuple[PlaybookResult, dict[str, str], set[str]]:
    for name, result, pkgs, held in lab.runs:
        if name == label:
            return result, pkgs, held
    pytest.fail(f"run {label!r} did not happen (an earlier test in this module failed)")


def test_package_selection_pin_and_hold_from_the_local_repo(lab: Lab) -> None:
    result = lab.play("r550", 550)
    assert result.success, {h: r.error for h, r in result.hosts.items()}
    _, pkgs, held = _run(lab, "r550")
    drv = f"{BRANCHES[550]['driver']}-0ubuntu1"
    # R550 on Hopper is the proprietary flavour (open modules only from R560, matrix.kernel_modules)
    want = {
        "nvidia-driver-550-server": drv, "nvidia-utils-550-server": drv,
        "nvidia-compute-utils-550-server": drv, "libnvidia-compute-550-server": drv,
        "nvidia-fabricmanager-550": f"{BRANCHES[550]['driver']}-1",
        "libnccl2": BRANCHES[550]["nccl"], "libnccl-dev": BRANCHES[550]["nccl"],
        "cuda-toolkit-12-4": "12.4.1-1",
    }
    assert pkgs == want
    # everything the roles asked for by name is held; the dependency pulled in by apt is not
    assert held == set(want) - {"libnvidia-compute-550-server"}
    prefs = host_sh(lab.target, f"cat {TEST_DIR}/state/apt-gpu/preferences.d/nvidia-driver")
    assert "Pin: version 550.*" in prefs and "Pin-Priority: 1001" in prefs
    assert "blacklist nouveau" in host_sh(lab.target, "cat /etc/modprobe.d/private-llm-blacklist-nouveau.conf")
    assert host_sh(lab.target, "systemctl is-active nvidia-fabricmanager.service").strip() == "active"


def test_second_run_on_the_right_branch_changes_nothing(lab: Lab) -> None:
    _run(lab, "r550")
    before = packages(lab.target)
    result = lab.play("r550-again", 550)
    assert result.success, {h: r.error for h, r in result.hosts.items()}
    assert result.changed == 0, [r.changed_tasks for r in result.hosts.values()]
    assert packages(lab.target) == before


def test_branch_upgrade_replaces_the_held_packages(lab: Lab) -> None:
    _run(lab, "r550")
    result = lab.play("r570", 570)
    assert result.success, {h: r.error for h, r in result.hosts.items()}
    _, pkgs, held = _run(lab, "r570")
    drv = f"{BRANCHES[570]['driver']}-0ubuntu1"
    assert pkgs == {
        "nvidia-driver-570-server-open": drv, "nvidia-utils-570-server": drv,
        "nvidia-compute-utils-570-server": drv, "libnvidia-compute-570-server": drv,
        "nvidia-fabricmanager-570": f"{BRANCHES[570]['driver']}-1",
        "libnccl2": BRANCHES[570]["nccl"], "libnccl-dev": BRANCHES[570]["nccl"],
        # toolkits of two CUDA versions live side by side (/usr/local/cuda-X.Y); the old one stays
        "cuda-toolkit-12-4": "12.4.1-1", "cuda-toolkit-12-8": "12.8.1-1",
    }
    assert not any("550" in name for name in pkgs), "a package of the old branch survived the upgrade"
    assert {"nvidia-driver-570-server-open", "nvidia-fabricmanager-570", "libnccl2", "cuda-toolkit-12-8"} <= held
    prefs = host_sh(lab.target, f"cat {TEST_DIR}/state/apt-gpu/preferences.d/nvidia-driver")
    assert "Pin: version 570.*" in prefs
    # The order inside the run: driver first, then the toolkit and NCCL for the new CUDA version,
    # then the fabric manager of the new driver's exact version.
    changed = next(iter(result.hosts.values())).changed_tasks
    order = [next(i for i, task in enumerate(changed) if task.startswith(prefix)) for prefix in (
        "Install driver branch R570", "Install the CUDA 12.8 toolkit", "Install NCCL", "Install fabric manager")]
    assert order == sorted(order), changed


def test_second_run_after_the_upgrade_changes_nothing(lab: Lab) -> None:
    _run(lab, "r570")
    result = lab.play("r570-again", 570)
    assert result.success, {h: r.error for h, r in result.hosts.items()}
    assert result.changed == 0, [r.changed_tasks for r in result.hosts.values()]
