"""NVIDIA's package names per OS release (bundle/nvidia_names.py)."""

import pytest

from installer.base.errors import InstallerError
from installer.base.paths import role_defaults
from installer.bundle import nvidia_names
from installer.inventory import targets as os_targets


def test_every_target_has_nvidias_repository_folder() -> None:
    assert {t: nvidia_names.repo_folder(t) for t in os_targets.NAMES} == {
        "debian-12": "debian12", "debian-13": "debian13", "ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404",
    }
    with pytest.raises(InstallerError, match="unknown target 'rocky-9'"):
        nvidia_names.repo_folder("rocky-9")


def test_ubuntu_names_are_the_roles_defaults_and_debian_ones_pick_the_branch_by_metapackage() -> None:
    ubuntu = role_defaults("nvidia_driver")["nvidia_driver_packages"]
    assert nvidia_names.driver_templates("ubuntu-22.04") == nvidia_names.driver_templates("ubuntu-24.04") == ubuntu
    assert nvidia_names.driver_packages("ubuntu-24.04", 580, open_modules=True) == [
        "nvidia-driver-580-server-open", "nvidia-utils-580-server", "nvidia-compute-utils-580-server"]
    for debian in ("debian-12", "debian-13"):
        assert nvidia_names.driver_packages(debian, 580, open_modules=True) == [
            "cuda-drivers-580", "nvidia-kernel-open-dkms"]
        assert nvidia_names.driver_packages(debian, 550, open_modules=False) == [
            "cuda-drivers-550", "nvidia-kernel-dkms"]


def test_fabric_manager_and_dcgm_names_are_the_same_on_every_release() -> None:
    fm = role_defaults("fabricmanager")["fabricmanager_package"].replace("{branch}", "580")
    for t in os_targets.NAMES:
        assert nvidia_names.fabricmanager_package(t, 580) == fm == "nvidia-fabricmanager-580"
        assert nvidia_names.dcgm_package(t, "12.8") == "datacenter-gpu-manager-4-cuda12"
        assert nvidia_names.dcgm_package(t, "13.0") == "datacenter-gpu-manager-4-cuda13"
