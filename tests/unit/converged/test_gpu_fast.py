"""GPU hosts on the fast path (installer/converged/fast_path.py, installer/flows/deploy.py): the doctor's health
checks stand where gpu_verify's result would be, and a failed one sends `up` to Ansible."""

from pathlib import Path

from installer.converged import fast_path as converged
from installer.flows import deploy
from installer.gpu import doctor as gpu_doctor
from installer.hosts.ssh import Target

OK = {
    "host": "g1", "status": "ok",
    "facts": {"gpus": [{"name": "NVIDIA H200"}] * 8, "driver": {"version": "580.95.05"},
              "cuda_driver_version": "13.0"},
    "checks": [{"name": "ecc", "status": "ok", "detail": "no uncorrectable errors"},
               {"name": "xid", "status": "ok", "detail": "none this boot"}],
}
FAILED = {**OK, "host": "g2", "status": "fail", "checks": [
    {"name": "ecc", "status": "fail", "detail": "GPU 3: 2 uncorrectable errors"},
    {"name": "xid", "status": "ok", "detail": "none this boot"}]}


def test_the_fast_path_checks_gpus_without_gemm_or_all_reduce() -> None:
    argv = deploy.FAST_GPU_CHECKS.argv()
    assert argv[0] == "check" and "--no-gemm" in argv and "--no-nccl" in argv


def test_a_failed_gpu_check_is_a_reason_for_a_full_configure() -> None:
    assert converged.gpu_reasons([OK, FAILED]) == [
        "g2: GPU checks failed: ecc: GPU 3: 2 uncorrectable errors"]
    assert converged.gpu_reasons([{"host": "g3", "status": "fail", "error": "ssh rc 255: x"}]) == [
        "g3: GPU checks failed: ssh rc 255: x"]


def test_the_fast_paths_result_keeps_the_gpu_column() -> None:
    hosts = [Target("g1", "10.0.0.1", "root", 22, None, None), Target("c1", "10.0.0.2", "root", 22, None, None)]
    pb = converged.fast_result(hosts, Path("/inv"), {"g1": OK})
    assert pb.rc == 0 and pb.hosts["c1"].facts == {} and pb.hosts["c1"].changed == 0
    line = gpu_doctor.summary_line(pb.hosts["g1"].facts.get("gpu_verify"))
    assert line == "ok: 8x NVIDIA H200, driver 580.95.05, CUDA 13.0; xid ok"


def test_summary_rows_name_the_tasks_that_changed(tmp_path: Path) -> None:
    """The e2e repair test reads them from summary.json: a full run after drift changes only that."""
    from installer.ansible.runner import HostResult, PlaybookResult
    from installer.inventory.models import Inventory

    inv = Inventory.model_validate({
        "deployment": "demo", "model": {"path": str(tmp_path), "served_name": "tiny"},
        "hosts": [{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.2"}],
    })
    a = HostResult("a", ok=9, changed=2, changed_tasks=["Write the gateway configuration", "Restart gateway"])
    pb = PlaybookResult("successful", 0, {"a": a, "b": HostResult("b", ok=9)}, tmp_path)
    rows = {r.name: r.__dict__ for r in deploy.host_summaries(inv, pb, {}, check=True)}
    assert rows["a"]["changed_tasks"] == ["Write the gateway configuration", "Restart gateway"]
    assert rows["b"]["changed_tasks"] == []
