"""NVIDIA's package names per OS release, as NVIDIA's CUDA repositories publish them.

NVIDIA keeps one repository per release (developer.download.nvidia.com/compute/cuda/repos/
<folder>/x86_64): ubuntu2204 and ubuntu2404 carry Ubuntu's per-branch driver names
(nvidia-driver-580-server-open, ...); debian12 and debian13 carry Debian-style driver packages
whose names hold no branch (nvidia-kernel-open-dkms, ...), and the branch is chosen by the
per-branch metapackage cuda-drivers-<branch> (what NVIDIA's own Ansible role installs there)
and by the role's apt pin on the branch. The toolkit (cuda-toolkit-X-Y), NCCL (libnccl2,
libnccl-dev, versions ending +cudaX.Y), fabric manager (nvidia-fabricmanager-<branch>) and
DCGM 4 (datacenter-gpu-manager-4-cuda<major>) have the same names in all four.

Driver names are templates the nvidia_driver role fills in on the host, where the branch is
chosen: {branch} is the branch, {open} is "-open" for NVIDIA's open kernel modules, else "".
Ubuntu's are the role's defaults; a Debian host gets the Debian list as a host variable
(bundle/layout.py host_vars).
"""

from __future__ import annotations

from installer.inventory import targets as os_targets

REPO_FOLDERS = {
    "debian-12": "debian12",
    "debian-13": "debian13",
    "ubuntu-22.04": "ubuntu2204",
    "ubuntu-24.04": "ubuntu2404",
}

_UBUNTU_DRIVER = (
    "nvidia-driver-{branch}-server{open}",
    "nvidia-utils-{branch}-server",
    "nvidia-compute-utils-{branch}-server",
)
# cuda-drivers-<branch> depends on the branch's driver and its kernel modules (the proprietary or
# the open ones); naming nvidia-kernel{open}-dkms makes apt take the flavour the host needs.
_DEBIAN_DRIVER = ("cuda-drivers-{branch}", "nvidia-kernel{open}-dkms")


def repo_folder(target: str) -> str:
    """NVIDIA's repository folder for a target: where its GPU .debs are downloaded from."""
    return REPO_FOLDERS[os_targets.get(target).name]


def driver_templates(target: str) -> list[str]:
    """The nvidia_driver role's package templates for a target's hosts."""
    return list(_DEBIAN_DRIVER if os_targets.get(target).os_id == "debian" else _UBUNTU_DRIVER)


def driver_packages(target: str, branch: int, open_modules: bool) -> list[str]:
    """The driver packages a host of `target` installs for one branch and kernel-module flavour."""
    return [
        t.replace("{branch}", str(branch)).replace("{open}", "-open" if open_modules else "")
        for t in driver_templates(target)
    ]


def fabricmanager_package(target: str, branch: int) -> str:
    os_targets.get(target)
    return f"nvidia-fabricmanager-{branch}"


def dcgm_package(target: str, cuda: str) -> str:
    """DCGM 4's package for the CUDA major version (datacenter-gpu-manager-4-cuda12, -cuda13)."""
    os_targets.get(target)
    return f"datacenter-gpu-manager-4-cuda{cuda.split('.')[0]}"
