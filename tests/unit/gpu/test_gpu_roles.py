"""The GPU roles run for real (ansible-playbook, connection local) against what a host shows.

This machine has no GPU: that is the lab hosts' case. For GPU hosts a fake `nvidia-smi` on
PATH prints captured or synthetic output (tests/unit/fixtures/gpu), so the roles' decisions
(skip, verify and change nothing, refuse an impossible driver/CUDA pair before any change,
refuse a bundle without GPU packages) run through the real role code. What installing packages
does is not tested here: that needs a host with a GPU whose driver may be replaced.
"""

import datetime
from pathlib import Path

from installer.ansible import render
from installer.bundle.manifest import Manifest
from installer.gpu import matrix
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from tests.support.roles import msgs, play

GPU_ROLES = ["nvidia_driver", "cuda", "nccl", "fabricmanager", "gpu_verify"]


def test_cpu_deployment_skips_every_gpu_role_and_changes_nothing(tmp_path: Path) -> None:
    r, stats, results = play(tmp_path, device="cpu", roles=GPU_ROLES)
    assert r.rc == 0, msgs(results)
    assert not stats.get("changed") and not stats.get("failures")
    text = msgs(results)
    assert "no NVIDIA GPU detected; engine_device is cpu: driver setup skipped" in text
    for role in ("CUDA toolkit", "NCCL", "fabric manager", "GPU checks"):
        assert f"engine_device is cpu: {role} skipped" in text


def test_gpu_deployment_on_a_host_without_gpu_fails_clearly(tmp_path: Path) -> None:
    r, stats, results = play(tmp_path, device="gpu", roles=GPU_ROLES)
    assert r.rc != 0 and not stats.get("changed")
    assert "no NVIDIA GPU detected on localhost" in msgs(results)
    assert "set engine.device to cpu" in msgs(results)


def test_right_driver_is_verified_and_left_unchanged(tmp_path: Path) -> None:
    # nvidia-smi as it printed on the project's H200
    r, stats, results = play(tmp_path, device="gpu", roles=["nvidia_driver"], smi="h200_r580")
    assert r.rc == 0, msgs(results)
    assert not stats.get("changed")
    assert "580.159.04" in msgs(
        results
    ) and "right for CUDA 13.0 (>= 580.65.06); verified, nothing changed" in msgs(results)


def test_impossible_driver_cuda_pair_fails_before_any_change(tmp_path: Path) -> None:
    # a V100 with the default plan (CUDA 13.0, which dropped Volta)
    r, stats, results = play(
        tmp_path, device="gpu", roles=["nvidia_driver"], smi="synthetic_v100_r535"
    )
    assert r.rc != 0 and not stats.get("changed")
    text = msgs(results)
    assert "CUDA 13.0 does not support volta GPUs" in text and "Nothing was changed" in text


def test_a_volta_host_verifies_under_a_cuda_12_plan(tmp_path: Path) -> None:
    plan = matrix.plan_table("12.2", today=datetime.date(2026, 11, 29))
    r, stats, results = play(
        tmp_path,
        device="gpu",
        roles=["nvidia_driver"],
        smi="synthetic_v100_r535",
        nvidia_driver_plan=plan,
    )
    assert r.rc == 0, msgs(results)
    assert not stats.get("changed")
    assert "right for CUDA 12.2 (>= 535.54.03); verified" in msgs(results)


def test_an_old_driver_needs_the_bundles_gpu_repository(tmp_path: Path) -> None:
    # an A100 on R535 under the CUDA 13.0 plan: R580 must be installed, and this bundle has none
    r, stats, results = play(
        tmp_path, device="gpu", roles=["nvidia_driver"], smi="synthetic_a100_r535", check=True
    )
    assert r.rc != 0 and not stats.get("changed")
    text = msgs(results)
    assert "install branch R580 (open kernel modules) for CUDA 13.0" in text
    assert "debs/Packages is missing: this bundle has no GPU packages" in text


def test_verify_mode_refuses_to_install(tmp_path: Path) -> None:
    r, _, results = play(
        tmp_path,
        device="gpu",
        roles=["nvidia_driver"],
        smi="synthetic_a100_r535",
        nvidia_driver_mode="verify",
    )
    assert r.rc != 0
    assert "driver '535.183.01' does not serve CUDA 13.0 on ampere GPUs" in msgs(results)


def test_render_gives_the_gpu_roles_their_variables(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    inv_file = tmp_path / "site.yml"
    inv_file.write_text(
        "deployment: demo\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "hosts: [{name: h1, address: 10.0.0.1}]\n"
        "engine: {device: gpu}\n"
    )
    inv = load_inventory(inv_file)
    man = Manifest(target={}, components={}, packages=[])
    gv = render.group_vars(deployment_plan.build(inv), man)
    assert gv["engine_device"] == "gpu"
    assert gv["nvidia_driver_plan"]["cuda_version"] == matrix.DEFAULT_CUDA
    assert gv["nvidia_driver_plan"]["generations"]["hopper"]["branch"] == 580
    assert gv["cuda_version"] == gv["nccl_cuda_version"] == matrix.DEFAULT_CUDA
