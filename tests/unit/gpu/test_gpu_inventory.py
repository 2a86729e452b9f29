"""The inventory's gpu section, rendered into the GPU roles' variables (group_vars)."""

from pathlib import Path

from installer.ansible import render
from installer.bundle.manifest import Manifest
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan


def test_gpu_section_reaches_the_roles(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "site.yml").write_text(
        "deployment: demo\n"
        "model: {path: weights, served_name: tiny}\n"
        "hosts: [{name: h1, address: 10.0.0.1}]\n"
        "engine: {device: gpu}\n"
        "gpu: {cuda: '12.8', driver_branch: 570, generation: hopper, reboot: forbid, packages_dir: debs}\n"
    )
    inv = load_inventory(tmp_path / "site.yml")
    assert inv.gpu.packages_dir == tmp_path / "debs"  # relative to the inventory file
    gv = render.group_vars(deployment_plan.build(inv), Manifest({}, {}, []))
    assert gv["cuda_version"] == gv["nccl_cuda_version"] == "12.8"
    assert gv["nvidia_driver_allow_reboot"] is False
    plan = gv["nvidia_driver_plan"]
    assert plan["branch_pin"] == 570 and plan["min_driver"] == "570.26"
    assert plan["generations"]["hopper"]["branch"] == 570 and plan["generations"]["hopper"]["error"] == ""


def test_defaults_keep_cuda_13_and_allow_reboots(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "site.yml").write_text(
        "deployment: demo\nmodel: {path: weights, served_name: tiny}\nhosts: [{name: h1, address: 10.0.0.1}]\n"
    )
    gv = render.group_vars(deployment_plan.build(load_inventory(tmp_path / "site.yml")), Manifest({}, {}, []))
    assert gv["cuda_version"] == "13.0" and gv["nvidia_driver_allow_reboot"] is True
    assert gv["nvidia_driver_plan"]["branch_pin"] == 0
