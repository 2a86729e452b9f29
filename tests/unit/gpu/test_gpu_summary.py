"""GPU check results per host in `installer up`'s summary (row text and summary.json)."""

import json
from pathlib import Path

from installer.ansible.runner import HostResult, PlaybookResult
from installer.flows.deploy import host_summaries
from installer.gpu.doctor import summary_line
from installer.inventory.models import Inventory

CAPTURED = Path(__file__).parents[1] / "fixtures" / "gpu" / "h200_r580" / "doctor_check.json"


def _h200() -> dict:
    return json.loads(CAPTURED.read_text())["hosts"][0]


def test_line_from_the_h200_capture() -> None:
    assert summary_line(_h200()) == (
        "ok: 1x NVIDIA H200, driver 580.159.04, CUDA 13.0; xid ok; gemm ok >= 788 TFLOP/s; nccl ok"
    )


def test_failed_checks_are_named_and_no_result_is_empty() -> None:
    result = _h200()
    result["status"] = "fail"
    result["checks"].append({"name": "gpu0", "status": "fail", "detail": "ECC uncorrected errors 3"})
    assert summary_line(result).startswith("fail: 1x NVIDIA H200") and "gpu0 fail" in summary_line(result)
    assert summary_line(None) == "" and summary_line({}) == ""


def test_host_rows_carry_the_gpu_line_and_the_whole_result(tmp_path: Path) -> None:
    inv = Inventory.model_validate({
        "deployment": "demo", "model": {"path": str(tmp_path), "served_name": "tiny"},
        "hosts": [{"name": "g1", "address": "10.0.0.1"}, {"name": "c1", "address": "10.0.0.2"}],
    })
    gpu_host = HostResult("g1", ok=10, facts={"gpu_verify": _h200()})
    pb = PlaybookResult("successful", 0, {"g1": gpu_host, "c1": HostResult("c1", ok=10)}, tmp_path)
    rows = {r.name: r for r in host_summaries(inv, pb, {}, check=True)}
    assert rows["g1"].gpu.startswith("ok: 1x NVIDIA H200") and rows["g1"].gpu_checks["status"] == "ok"
    assert rows["c1"].gpu == "" and rows["c1"].gpu_checks == {}
    json.dumps([r.__dict__ for r in rows.values()])  # summary.json takes the rows as they are
