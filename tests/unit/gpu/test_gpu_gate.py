"""The GPU gate: each GPU's bf16 GEMM against a share of its type's peak (installer/gpu/doctor.py
gemm_gate, peaks in installer/gpu/matrix.py), the inventory's gpu.gate setting, and where the
gate runs: inside the engine role, after the release's environment exists and before any engine
(re)starts, with that environment's torch (real ansible-playbook runs)."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from installer.ansible import render
from installer.base.errors import InventoryError
from installer.bundle.manifest import Manifest
from installer.gpu import doctor, matrix
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from tests.support import REPO
from tests.support.roles import msgs, play

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
PEAKS = matrix.peak_tflops_by_name()


def _measured_h200() -> list[dict[str, Any]]:
    """GPU 0's GEMM as `installer doctor` measured it on the two-GPU H200 machine."""
    (host,) = json.loads((FIXTURES / "h200x2_r580" / "doctor_check.json").read_text())["hosts"]
    return [next(c for c in host["checks"] if c["name"] == "gemm")["gpus"][0]]


def test_peaks_cover_the_gpus_the_gate_is_for() -> None:
    assert {k: matrix.GPU_TYPES[k].peak_bf16_tflops for k in ("h100", "h200", "a100-80g", "a10", "l40s")} == {
        "h100": 989.0, "h200": 989.0, "a100-80g": 312.0, "a10": 125.0, "l40s": 362.0
    }
    assert matrix.gpu_type_of_name("NVIDIA H200") == matrix.GPU_TYPES["h200"]
    assert matrix.gpu_type_of_name("NVIDIA RTX 6000 Ada Generation") is None
    assert "Tesla V100-SXM2-32GB" not in PEAKS  # no bf16 tensor cores: nothing to hold it to


def test_a_healthy_h200_passes_the_default_gate() -> None:
    measured = _measured_h200()
    assert 780 < measured[0]["tflops"] < 810
    assert doctor.gemm_gate(measured, peaks=PEAKS, min_share=matrix.DEFAULT_GATE_SHARE) == ("ok", [])


def test_a_low_figure_fails_naming_the_gpu_the_figure_the_threshold_and_the_waiver() -> None:
    low = [{**_measured_h200()[0], "tflops": 412.3}]
    status, reasons = doctor.gemm_gate(low, peaks=PEAKS, min_share=0.6)
    assert status == "fail"
    assert reasons[0] == (
        "gpu0 (NVIDIA H200) ran 412 TFLOP/s, below the gate's 593 TFLOP/s "
        "(0.6 of its 989 TFLOP/s dense bf16 peak)"
    )
    assert "gpu.gate.waive: true" in reasons[1] and "gpu.gate.min_share" in reasons[1]
    waived = doctor.gemm_gate(low, peaks=PEAKS, min_share=0.6, waived=True)
    assert waived == ("warn", [reasons[0], "gate waived by gpu.gate.waive: true in the inventory"])
    # a GPU of a type without a known peak is reported, not judged, unless an absolute floor is set
    other = [{**low[0], "name": "NVIDIA RTX 6000 Ada Generation"}]
    assert doctor.gemm_gate(other, peaks=PEAKS, min_share=0.6) == ("ok", [])
    assert doctor.gemm_gate(other, peaks=PEAKS, min_share=0.6, min_tflops=500)[0] == "fail"


def test_the_gemm_check_fails_the_host_on_an_injected_low_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    low = [{**_measured_h200()[0], "tflops": 300.0}]
    monkeypatch.setattr(doctor, "_torch_json", lambda *a, **k: {"status": "ok", "gpus": low, "torch": "2.11"})
    r = doctor.check_gemm("/venv/bin/python", 8192, 10, 0.0, peaks=PEAKS, min_share=0.6)
    assert r["status"] == "fail" and "gpu0 (NVIDIA H200) ran 300 TFLOP/s, below the gate's 593" in r["detail"]
    assert r["python"] == "/venv/bin/python"
    before = doctor.check_gemm("/venv/bin/python", 8192, 10, 0.0)  # min_tflops 0, as the role passed before
    assert before["status"] == "ok"


def test_the_doctor_command_line_takes_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def check(**kw: Any) -> dict[str, Any]:
        seen.update(kw)
        return {"status": "fail"}

    monkeypatch.setattr(doctor, "check", check)
    rc = doctor.main(["check", "--min-share", "0.6", "--peak-tflops", json.dumps(PEAKS), "--waive",
                      "--torch-python", "/v/bin/python", "--torch-required"])
    assert rc == 1
    assert (seen["min_share"], seen["waived"], seen["torch_required"]) == (0.6, True, True)
    assert seen["peaks"]["NVIDIA H200"] == 989.0 and seen["torch_pythons"] == ["/v/bin/python"]


def test_the_engine_venv_is_tried_before_the_interpreter_running_the_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []
    monkeypatch.setattr(doctor, "_has_torch", lambda p: tried.append(p) or False)
    venv = sys.executable  # any interpreter that exists
    assert doctor.find_torch_python([venv, "/nonexistent/python"], only=True) == ""
    assert tried == [venv]


def _inventory(tmp: Path, gate: str) -> Path:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    inv = tmp / "inventory.yml"
    inv.write_text(
        "deployment: demo\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "hosts: [{name: h1, address: 10.0.0.1}]\n"
        "engine: {device: gpu}\n"
        f"gpu:\n  gate: {gate}\n"
    )
    return inv


def test_the_inventory_gate_reaches_the_role(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "{min_share: 0.5, waive: true}"))
    gv = render.group_vars(deployment_plan.build(inv), Manifest(target={}, components={}, packages=[]))
    assert (gv["gpu_verify_min_share"], gv["gpu_verify_waive"]) == (0.5, True)
    assert gv["gpu_verify_peak_tflops"] == PEAKS
    # the role's own defaults hold the library's table and default share
    defaults = yaml.safe_load((REPO / "playbooks/roles/gpu_verify/defaults/main.yml").read_text())
    assert defaults["gpu_verify_peak_tflops"] == PEAKS
    assert (defaults["gpu_verify_min_share"], defaults["gpu_verify_waive"]) == (matrix.DEFAULT_GATE_SHARE, False)


@pytest.mark.parametrize("gate", ["{min_share: 1.5}", "{min_share: 0}", "{waive: maybe}", "{min_tflops: 500}"])
def test_a_bad_gate_setting_is_refused_at_its_line(tmp_path: Path, gate: str) -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory(_inventory(tmp_path, gate))
    text = "\n".join([str(err.value), *err.value.details])
    assert f"{tmp_path / 'inventory.yml'}:6" in text and "gpu.gate" in text


def test_the_gate_runs_after_the_engine_install_and_before_any_engine_starts() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "--list-tasks", "site.yml"],
        cwd=REPO / "playbooks", capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    tasks = [line.strip().split("\t")[0] for line in out.splitlines() if line.startswith("      ")]
    gate = tasks.index("Check the GPUs with the engine's torch")
    # the venv comes from the common role's shared task (dynamic: --list-tasks shows its include)
    assert tasks.index("Create the engine's virtual environment from the bundle's wheels") < gate
    assert tasks.index("engine : Mark the environment complete") < gate
    units = tasks.index("engine : Write the engine systemd units")
    assert gate < units < tasks.index("engine : Enable and start the engines")
    # `current` moves only after the gate: an engine restarting later never runs an ungated release
    assert gate < tasks.index("engine : Point current at this release") < units
    assert not any(t.startswith("gpu_verify :") for t in tasks[:gate])  # no earlier run without torch


def test_a_gpu_host_whose_engine_env_has_no_cuda_torch_fails_the_gate(tmp_path: Path) -> None:
    """The role as the engine role includes it: the engine's python only, required. Before, a
    host without torch skipped the GEMM and all-reduce and passed."""
    r, _, results = play(
        tmp_path, device="gpu", roles=["gpu_verify"], smi="h200_r580",
        gpu_verify_torch_pythons=[str(tmp_path / "release" / "venv" / "bin" / "python")],
        gpu_verify_torch_required=True,
    )
    assert r.rc != 0
    text = msgs(results)
    assert f"gemm: no torch with CUDA in {tmp_path / 'release' / 'venv' / 'bin' / 'python'}" in text
    assert "nccl: no torch with CUDA" in text
