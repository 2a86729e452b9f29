"""gpu.packages_dir into the bundle: which names the roles will ask apt for, and the checks that
refuse a folder the roles could not install from (real .debs built with dpkg-deb)."""

import json
from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import BundleError
from installer.bundle import aptrepo, gpu_packages
from installer.inventory.models import Inventory
from tests.support.gpu_debs import build_repo, fake_deb


def inventory(tmp: Path, **gpu: Any) -> Inventory:
    return Inventory.model_validate({
        "deployment": "demo",
        "model": {"path": str(tmp), "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "10.0.0.1"}],
        "engine": {"device": gpu.pop("device", "gpu")},
        "gpu": gpu,
    })


def test_names_follow_the_matrix_and_the_roles_defaults(tmp_path: Path) -> None:
    want = gpu_packages.wanted(inventory(tmp_path, cuda="12.8", driver_branch=570), "ubuntu-24.04")
    assert want == {
        "nvidia_driver": ["nvidia-driver-570-server-open", "nvidia-utils-570-server",
                          "nvidia-compute-utils-570-server"],
        "fabricmanager": ["nvidia-fabricmanager-570"],
        "cuda": ["cuda-toolkit-12-8"],
        "nccl": ["libnccl2", "libnccl-dev"],
    }
    # R550 on Hopper: proprietary modules (NVIDIA's open modules are the default from R560)
    old = gpu_packages.wanted(inventory(tmp_path, cuda="12.4", driver_branch=550, generation="hopper"), "ubuntu-22.04")
    assert old["nvidia_driver"][0] == "nvidia-driver-550-server"


def test_debian_hosts_want_the_names_of_nvidias_debian_repositories(tmp_path: Path) -> None:
    inv = inventory(tmp_path, cuda="12.8", driver_branch=570)
    for target in ("debian-12", "debian-13"):
        want = gpu_packages.wanted(inv, target)
        assert want["nvidia_driver"] == ["cuda-drivers-570", "nvidia-kernel-open-dkms"]
        # the same toolkit, NCCL and fabric manager names as on Ubuntu
        assert {k: v for k, v in want.items() if k != "nvidia_driver"} == {
            k: v for k, v in gpu_packages.wanted(inv, "ubuntu-24.04").items() if k != "nvidia_driver"
        }
    old = inventory(tmp_path, cuda="12.4", driver_branch=550, generation="hopper")
    assert gpu_packages.wanted(old, "debian-12")["nvidia_driver"] == ["cuda-drivers-550", "nvidia-kernel-dkms"]


def _debian_repo(repo: Path, fabricmanager: str = "570.195.03-1") -> list[dict[str, str]]:
    """NVIDIA's debian12 repository in miniature: branch-less driver names, versions 570.*."""
    repo.mkdir(parents=True)
    drv = "570.195.03-1"
    fake_deb(repo, "nvidia-kernel-open-dkms", drv)
    fake_deb(repo, "nvidia-driver", drv, depends=f"nvidia-kernel-open-dkms (= {drv}) | nvidia-kernel-dkms (= {drv})")
    fake_deb(repo, "cuda-drivers-570", drv, depends=f"nvidia-driver (>= {drv})")
    fake_deb(repo, "nvidia-fabricmanager-570", fabricmanager)
    fake_deb(repo, "libnccl2", "2.26.5-1+cuda12.8")
    fake_deb(repo, "libnccl-dev", "2.26.5-1+cuda12.8", depends="libnccl2 (= 2.26.5-1+cuda12.8)")
    fake_deb(repo, "cuda-toolkit-12-8", "12.8.1-1")
    return aptrepo.write_index(repo)


def test_a_debian_folder_passes_for_debian_hosts_and_not_for_ubuntu_ones(tmp_path: Path) -> None:
    inv = inventory(tmp_path, cuda="12.8", driver_branch=570)
    index = _debian_repo(tmp_path / "repo")
    assert gpu_packages.check(inv, index, "debian-12") == []
    assert "nvidia-driver-570-server-open is missing (role nvidia_driver)" in gpu_packages.check(
        inv, index, "ubuntu-24.04")
    # fabric manager is matched to the driver by version, though Debian's names hold no branch
    wrong = _debian_repo(tmp_path / "wrong", fabricmanager="570.172.08-1")
    assert any("nvidia-fabricmanager-570 570.172.08 does not match driver 570.195.03" in p
               for p in gpu_packages.check(inv, wrong, "debian-13"))


def test_a_complete_folder_passes(tmp_path: Path) -> None:
    build_repo(tmp_path / "repo")
    index = aptrepo.parse_index((tmp_path / "repo" / "Packages").read_text())
    assert gpu_packages.check(inventory(tmp_path, cuda="12.8", driver_branch=570), index, "ubuntu-24.04") == []


def test_missing_nccl_build_and_wrong_fabric_manager_are_named(tmp_path: Path) -> None:
    build_repo(tmp_path / "repo")
    repo = tmp_path / "repo"
    for deb in repo.glob("libnccl*cuda12.8*.deb"):
        deb.unlink()
    (repo / "nvidia-fabricmanager-570_570.195.03-1_all.deb").unlink()
    fake_deb(repo, "nvidia-fabricmanager-570", "570.172.08-1")
    index = aptrepo.write_index(repo)
    problems = gpu_packages.check(inventory(tmp_path, cuda="12.8", driver_branch=570), index, "ubuntu-24.04")
    assert "libnccl2 built for CUDA 12.8 (a version ending +cuda12.8) is missing (role nccl)" in problems
    assert any("nvidia-fabricmanager-570 570.172.08 does not match driver 570.195.03" in p for p in problems)


def test_unmet_nvidia_dependency_is_refused_and_distribution_ones_are_listed(tmp_path: Path) -> None:
    build_repo(tmp_path / "src")
    src = tmp_path / "src"
    (src / "libnvidia-compute-570-server_570.195.03-0ubuntu1_all.deb").unlink()
    for f in ("Packages", "Release"):
        (src / f).unlink()
    inv = inventory(tmp_path, cuda="12.8", driver_branch=570, packages_dir=str(src))
    with pytest.raises(BundleError) as err:
        gpu_packages.add_to_bundle(inv, tmp_path / "bundle" / "debs", "ubuntu-24.04")
    assert any("needs libnvidia-compute-570-server (= 570.195.03-0ubuntu1)" in d for d in err.value.details)

    fake_deb(src, "libnvidia-compute-570-server", "570.195.03-0ubuntu1", depends="libc6 (>= 2.34)")
    entries = gpu_packages.add_to_bundle(inv, tmp_path / "bundle" / "debs", "ubuntu-24.04")
    names = {e["name"] for e in entries}
    assert {"nvidia-driver-570-server-open", "libnccl2", "cuda-toolkit-12-8"} <= names
    # the GPU roles install these by name, not the common role (which takes groups)
    assert {e["groups"] for e in entries} == {""}
    index = aptrepo.parse_index((tmp_path / "bundle" / "debs" / "Packages").read_text())
    assert len(index) == len(list(src.glob("*.deb")))
    host_deps = (tmp_path / "bundle" / gpu_packages.HOST_DEPENDENCIES).read_text()
    assert host_deps == "libnvidia-compute-570-server 570.195.03-0ubuntu1 needs libc6 (>= 2.34)\n"


def test_nothing_for_cpu_or_without_a_folder_and_empty_folder_refused(tmp_path: Path) -> None:
    assert gpu_packages.add_to_bundle(inventory(tmp_path, device="cpu", packages_dir=str(tmp_path)),
                                      tmp_path / "b", "debian-12") == []
    assert gpu_packages.add_to_bundle(inventory(tmp_path), tmp_path / "b", "debian-12") == []
    assert gpu_packages.bundle_input(inventory(tmp_path)) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match=r"has no \.deb files"):
        gpu_packages.add_to_bundle(
            inventory(tmp_path, packages_dir=str(tmp_path / "empty")), tmp_path / "b", "debian-12")


def test_folder_contents_are_part_of_the_bundle_cache_key(tmp_path: Path) -> None:
    build_repo(tmp_path / "src")
    inv = inventory(tmp_path, cuda="12.8", packages_dir=str(tmp_path / "src"))
    before = json.dumps(gpu_packages.bundle_input(inv))
    fake_deb(tmp_path / "src", "libnccl2", "2.27.3-1+cuda12.8")
    assert json.dumps(gpu_packages.bundle_input(inv)) != before
