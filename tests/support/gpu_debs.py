"""Real .deb files with NVIDIA's package names, versions and relationships but empty payloads,
for the GPU roles' package mechanics (built by dpkg-deb, indexed as the bundle's apt repository)."""

import shutil
import subprocess
from pathlib import Path

from installer.bundle import aptrepo
from installer.gpu import matrix

# Driver branches as NVIDIA ships them: version, the CUDA version the driver reports, NCCL build.
BRANCHES = {
    550: {"driver": "550.163.01", "cuda": "12.4", "nccl": "2.21.5-1+cuda12.4"},
    570: {"driver": "570.195.03", "cuda": "12.8", "nccl": "2.26.2-1+cuda12.8"},
}
ASSUMED = {"count": 2, "generation": "hopper", "nvswitches": 2}


def fake_deb(out: Path, name: str, version: str, *, depends: str = "", provides: str = "",
             files: dict[str, str] | None = None) -> None:
    """A real Debian package built by dpkg-deb; `provides` is also conflicted and replaced, as
    NVIDIA's branch packages do, so two branches cannot be installed side by side."""
    root = out / f"{name}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {name}", f"Version: {version}", "Architecture: all",
               "Maintainer: package test <test@invalid>", "Section: non-free/libs", "Priority: optional"]
    if depends:
        control.append(f"Depends: {depends}")
    if provides:
        control += [f"Provides: {provides}", f"Conflicts: {provides}", f"Replaces: {provides}"]
    control.append(f"Description: {name} (package-mechanics test, empty payload)")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    for path, text in (files or {}).items():
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        if "/bin/" in path:
            dest.chmod(0o755)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out / f"{name}_{version}_all.deb")],
                   check=True, capture_output=True)
    shutil.rmtree(root)


def build_repo(repo: Path) -> None:
    repo.mkdir(parents=True)
    work = repo.parent / "build"
    work.mkdir()
    for branch, b in BRANCHES.items():
        flavour = matrix.kernel_modules(str(ASSUMED["generation"]), branch)  # R550: proprietary, R570: open
        drv = f"{b['driver']}-0ubuntu1"
        lib = f"libnvidia-compute-{branch}-server"
        fake_deb(work, lib, drv, provides="libnvidia-compute")
        fake_deb(work, f"nvidia-utils-{branch}-server", drv, provides="nvidia-utils")
        fake_deb(work, f"nvidia-compute-utils-{branch}-server", drv, depends=f"{lib} (= {drv})",
                 provides="nvidia-compute-utils")
        fake_deb(work, f"nvidia-driver-{branch}-server{'-open' if flavour == 'open' else ''}", drv,
                 depends=f"{lib} (= {drv}), nvidia-utils-{branch}-server (= {drv}), "
                         f"nvidia-compute-utils-{branch}-server (= {drv})",
                 provides="nvidia-driver-binary")
        fake_deb(work, f"nvidia-fabricmanager-{branch}", f"{b['driver']}-1", provides="nvidia-fabricmanager",
                 files={"/lib/systemd/system/nvidia-fabricmanager.service":
                        "[Unit]\nDescription=package-test fabric manager\n[Service]\nExecStart=/bin/sleep infinity\n"
                        "[Install]\nWantedBy=multi-user.target\n"})
        nccl = b["nccl"]
        fake_deb(work, "libnccl2", nccl)
        fake_deb(work, "libnccl-dev", nccl, depends=f"libnccl2 (= {nccl})")
        cuda = b["cuda"]
        fake_deb(work, f"cuda-toolkit-{cuda.replace('.', '-')}", f"{cuda}.1-1",
                 files={f"/usr/local/cuda-{cuda}/bin/nvcc":
                        f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{cuda}.1'\n"})
    for deb in work.glob("*.deb"):
        deb.rename(repo / deb.name)
    work.rmdir()
    aptrepo.write_index(repo)
