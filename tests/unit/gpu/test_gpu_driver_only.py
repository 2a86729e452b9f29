"""GPU hosts without NVIDIA's packages in the bundle (no gpu.packages_dir) and without a system
CUDA toolkit or NCCL: the cuda and nccl roles verify the driver and install nothing, saying the
engines use the CUDA runtime and NCCL their wheels bring. Real ansible-playbook runs with the
H200's captured nvidia-smi output (driver 580.159.04, CUDA 13.0)."""

from pathlib import Path

from tests.support.roles import msgs, play

# This machine may have a toolkit of its own (/usr/local/cuda): look where none is.
NO_TOOLKIT = {"cuda_search_homes": ["/nonexistent/cuda"]}


def _bundle(tmp: Path, packages: str) -> None:
    (tmp / "bundle" / "debs").mkdir(parents=True, exist_ok=True)
    (tmp / "bundle" / "debs" / "Packages").write_text(packages)


def test_without_nvidia_packages_the_cuda_and_nccl_roles_verify_the_driver_only(tmp_path: Path) -> None:
    # the bundle's repository holds the OS packages only, as one built without gpu.packages_dir
    _bundle(tmp_path, "Package: redis-server\nVersion: 5:7.0.15-1\nFilename: ./redis-server.deb\n\n")
    r, stats, results = play(tmp_path, device="gpu", roles=["cuda", "nccl"], smi="h200_r580", **NO_TOOLKIT)
    assert r.rc == 0, msgs(results)
    assert not stats.get("changed")
    text = msgs(results)
    assert "driver only: no CUDA 13.0 toolkit on the host (found: none) and none in the bundle" in text
    assert "the engines use the CUDA runtime their wheels bring, nothing installed" in text
    assert "the driver supports CUDA 13.0" in text
    assert "NCCL from the wheels: no system NCCL and no build for CUDA 13.0 in the bundle" in text


def test_a_driver_too_old_for_the_cuda_version_still_fails(tmp_path: Path) -> None:
    _bundle(tmp_path, "")
    r, stats, results = play(tmp_path, device="gpu", roles=["cuda"], smi="synthetic_a100_r535")
    assert r.rc != 0 and not stats.get("changed")
    assert "the driver supports CUDA 12.2, older than cuda_version 13.0" in msgs(results)


def test_a_bundle_with_the_toolkit_and_nccl_still_installs_them(tmp_path: Path) -> None:
    _bundle(tmp_path, (
        "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\n\n"
        "Package: libnccl2\nVersion: 2.28.3-1+cuda13.0\n\n"
        "Package: libnccl2\nVersion: 2.27.7-1+cuda12.9\n\n"
    ))
    _, _, results = play(tmp_path, device="gpu", roles=["cuda", "nccl"], smi="h200_r580", check=True, **NO_TOOLKIT)
    text = msgs(results)
    assert "CUDA 13.0 toolkit missing (found: none): install cuda-toolkit-13-0" in text, text
    assert "NCCL missing: install the build for CUDA 13.0 from the bundle" in text
