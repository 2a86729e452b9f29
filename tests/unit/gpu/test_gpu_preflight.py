"""Preflight's GPU decisions (installer/preflight/gpu.py) and its refusal of hosts without systemd,
judged on what the real probe prints: preflight's shell probe runs here with a fake `nvidia-smi`
printing the GPUs captured on the project's H200 machines (tests/unit/fixtures/gpu)."""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import PreflightError
from installer.gpu import planner
from installer.inventory import Inventory, load_inventory
from installer.planning import engines, plan
from installer.preflight import gpu as preflight_gpu
from installer.preflight import hosts as preflight

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
GIB = 1024**3


def probe(tmp: Path, capture: str | None) -> dict[str, str]:
    """preflight's probe as `up` sends it for a GPU deployment, run by sh on this machine; with
    `capture`, nvidia-smi prints that capture's name, memory and driver columns."""
    path = os.environ["PATH"]
    if capture:
        bin_dir = tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        smi = bin_dir / "nvidia-smi"
        # query.csv holds doctor.SMI_FIELDS: name is column 2, driver 5, memory.total 6
        smi.write_text(f"#!/bin/sh\nawk -F', ' '{{print $2\", \"$6\", \"$5}}' {FIXTURES / capture / 'query.csv'}\n")
        smi.chmod(0o755)
        path = f"{bin_dir}:{path}"
    env = {"PATH": path, "PLI_BUNDLE_DIR": str(tmp / "none"), "PLI_RELEASE_FILE": str(tmp / "none")}
    out = subprocess.run(
        ["sh", "-c", preflight._PROBE + preflight_gpu.PROBE], env=env, capture_output=True, text=True, check=True
    )
    return preflight.parse_facts(out.stdout)


def load(tmp: Path, preset: str, gpu: str = "") -> Inventory:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(planner.PRESETS[preset]))
    inv = tmp / "inventory.yml"
    inv.write_text(
        "deployment: demo\n"
        f"model: {{path: {model}, served_name: m}}\n"
        "hosts:\n  - {name: g1, address: 10.0.0.1}\n"
        "engine: {device: gpu, max_model_len: 8192}\n"
        + (f"gpu:\n{gpu}" if gpu else "")
    )
    return load_inventory(inv)


def needs(inv: Inventory, packages: list[dict[str, str]] | None = None) -> preflight_gpu.GPUNeeds:
    found = preflight_gpu.needs(inv, packages or [])
    assert found is not None
    return found


def test_the_real_probe_reads_the_two_h200s(tmp_path: Path) -> None:
    facts = probe(tmp_path, "h200x2_r580")
    assert facts["gpu_smi"] == "yes"
    p = preflight_gpu.parse(facts)
    assert [(g.name, g.memory_mib, g.driver) for g in p.gpus] == [("NVIDIA H200", 143771, "580.159.04")] * 2
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    assert preflight_gpu.judge(facts, needs(inv)) == []


def test_gpu_inventory_on_a_host_without_gpu_is_refused(tmp_path: Path) -> None:
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    # what the probe prints on a host with no driver, no device node and no NVIDIA PCI device
    facts = {"gpu_smi": "no", "gpu_dev": "0", "gpu_pci": "0"}
    (problem,) = preflight_gpu.judge(facts, needs(inv))
    assert "engine.device is gpu but this host has no NVIDIA GPU" in problem and "engine.device: cpu" in problem
    # the same through preflight's whole judgement, which also names everything else
    needs_all = preflight.Needs(0, 0, 0, 0, "/b", "/r", gpu=needs(inv))
    assert problem in preflight._judge({**facts, "init": "systemd"}, needs_all, 0.0)
    # a CPU deployment asks nothing of the GPUs
    cpu = inv.model_copy(update={"engine": inv.engine.model_copy(update={"device": "cpu"})})
    assert preflight_gpu.needs(cpu, []) is None


def test_a_driver_older_than_the_bundles_cuda_is_refused_unless_the_bundle_brings_one(tmp_path: Path) -> None:
    facts = probe(tmp_path, "synthetic_a100_r535")  # two A100s on 535.183.01; CUDA 13.0 wants R580
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    (problem,) = preflight_gpu.judge(facts, needs(inv))
    assert "driver 535.183.01 is older than CUDA 13.0 needs (>= 580.65.06" in problem
    assert "upgrade the driver to R580 or newer" in problem and "set gpu.cuda to 12.2" in problem
    with_driver = [{"name": "nvidia-driver-580-server-open", "version": "580.95.05-0ubuntu1"}]
    assert preflight_gpu.judge(facts, needs(inv, with_driver)) == []


def test_gpus_without_a_working_driver(tmp_path: Path) -> None:
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    facts = {"gpu_smi": "yes", "gpu_rows": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
             "driver;", "gpu_dev": "0", "gpu_pci": "8"}
    (problem,) = preflight_gpu.judge(facts, needs(inv))
    assert problem.startswith("8 NVIDIA GPU(s) but nvidia-smi lists no GPU (NVIDIA-SMI has failed")
    assert "install driver R580 or newer" in problem
    assert preflight_gpu.judge(facts, needs(inv, [{"name": "nvidia-driver-580-server-open"}])) == []


def test_declared_gpus_the_host_contradicts_are_refused_naming_both(tmp_path: Path) -> None:
    facts = probe(tmp_path, "h200x2_r580")
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b", gpu="  type: h100\n  count: 4\n")
    problems = preflight_gpu.judge(facts, needs(inv))
    assert len(problems) == 2
    assert f"{tmp_path / 'inventory.yml'}:7: gpu.type is h100 but the host has NVIDIA H200 (h200)" in problems[0]
    assert f"{tmp_path / 'inventory.yml'}:8: gpu.count is 4 but the host has 2 GPU(s)" in problems[1]


def test_undeclared_gpus_are_laid_out_as_probed(tmp_path: Path) -> None:
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    assert engines.tuned(inv) is None  # undeclared GPUs: one engine of old, untuned
    notes: list[str] = []
    laid = preflight_gpu.with_probed_hardware(inv, {"g1": probe(tmp_path, "h200x2_r580")}, notes.append)
    assert (laid.gpu.type, laid.gpu.count) == ("h200", 2) and inv.gpu.type is None
    # one engine per H200 for a 7B model: the probe decided the layout
    tuned = engines.tuned(laid)
    assert tuned is not None
    assert [(e.host, e.env["CUDA_VISIBLE_DEVICES"]) for e in tuned.engines] == [("g1", "0"), ("g1", "1")]
    assert notes == ["GPUs from the hosts: 2x NVIDIA H200 per serving host (gpu.type h200)"]
    assert laid.where("engine", "device").startswith(f"{tmp_path / 'inventory.yml'}:")  # still knows its file


def test_a_model_that_does_not_fit_the_probed_gpus_is_refused(tmp_path: Path) -> None:
    inv = load(tmp_path, "deepseek-v3")  # 671B parameters on one host of two H200s
    laid = preflight_gpu.with_probed_hardware(inv, {"g1": probe(tmp_path, "h200x2_r580")})
    with pytest.raises(PreflightError) as err:
        preflight_gpu.plan_probed(laid, plan.build)
    assert "the model does not fit the hosts' GPUs (2x NVIDIA H200, probed)" in str(err.value)
    assert "no host was changed" in str(err.value)


def test_serving_hosts_with_different_gpus_are_refused(tmp_path: Path) -> None:
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    two = inv.model_copy(update={"hosts": [*inv.hosts, inv.hosts[0].model_copy(update={"name": "g2"})]})
    facts: dict[str, Any] = {"g1": probe(tmp_path, "h200x2_r580"), "g2": probe(tmp_path, "h200_r580")}
    with pytest.raises(PreflightError) as err:
        preflight_gpu.with_probed_hardware(two, facts)
    assert "different GPUs" in str(err.value)
    assert sorted(err.value.details) == ["g1: 2x NVIDIA H200", "g2: 1x NVIDIA H200"]


def test_a_host_whose_pid_1_is_not_systemd_is_refused_with_the_fix() -> None:
    """PID 1 on the project's H200 machine, as its doctor facts captured it (/proc/1/comm)."""
    init = json.loads((FIXTURES / "h200_r580" / "doctor_facts.json").read_text())["init"]
    assert init == "process_api"
    facts = {"os_id": "ubuntu", "os_version": "24.04", "python": "3.12", "init": init, "uid": "0",
             "disk_var_lib": str(100 * GIB), "disk_opt": str(100 * GIB), "mem_total_kib": str(128 * 1024**2)}
    needs_all = preflight.Needs(0, 0, 0, 8 * GIB, "/b", "/r")
    (problem,) = preflight._judge(facts, needs_all, 0.0)
    assert problem.startswith("PID 1 is 'process_api', not systemd")
    assert "run a systemd container with the GPUs passed through" in problem and "docs/gpu.md" in problem
    assert preflight._judge({**facts, "init": "systemd"}, needs_all, 0.0) == []


def test_the_h200_machine_as_preflight_saw_it(tmp_path: Path) -> None:
    """preflight's probe run on the project's H200 machine (tests/gpu/gate_on_gpu.sh, 2026-12-01):
    its GPU passes the GPU checks and lays out as one H200, and the host is refused, with the fix,
    for its PID 1 alone."""
    facts = preflight.parse_facts((FIXTURES / "h200_r580" / "preflight_probe.txt").read_text())
    inv = load(tmp_path, "deepseek-r1-distill-qwen-7b")
    assert preflight_gpu.judge(facts, needs(inv)) == []
    laid = preflight_gpu.with_probed_hardware(inv, {"g1": facts})
    assert (laid.gpu.type, laid.gpu.count) == ("h200", 1)
    needs_all = preflight.Needs(0, 0, 0, 8 * GIB, "/b", "/r", gpu=needs(inv))
    problems = preflight._judge(facts, needs_all, 0.0)
    assert [p for p in problems if "systemd" in p] == [preflight.not_systemd("process_api")]
