"""On a real GPU host: the doctor's checks, the driver matrix and tuner on real facts, and the
GPU roles in verify mode (a right driver is checked and nothing changes)."""

import os
import sys
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

from installer.gpu import doctor, matrix
from installer.gpu.planner import preset
from installer.gpu.tuner import HostHardware, tune

REPO = Path(__file__).parents[2]
GPU_ROLES = ["nvidia_driver", "cuda", "nccl", "fabricmanager", "gpu_verify"]


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    return doctor.facts()


def test_facts_see_the_gpus_and_the_driver(facts: dict[str, Any]) -> None:
    assert facts["gpu_count"] >= 1 and len(facts["gpus"]) == facts["gpu_count"]
    assert facts["generation"] in matrix.GENERATIONS
    assert facts["driver"]["version"] == facts["gpus"][0]["driver_version"]
    assert facts["cuda_driver_version"]


def test_the_installed_driver_is_right_for_its_cuda_version(facts: dict[str, Any]) -> None:
    assert matrix.driver_satisfies(
        facts["driver"]["version"], facts["generation"], facts["cuda_driver_version"]
    )


def test_check_runs_gemm_and_all_reduce(facts: dict[str, Any]) -> None:
    result = doctor.check(torch_pythons=[sys.executable])
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["gemm"]["status"] == "ok", checks["gemm"]
    assert all(g["correct"] for g in checks["gemm"]["gpus"])
    # a data-center GPU does far more than this; a broken or throttled one does not
    assert min(g["tflops"] for g in checks["gemm"]["gpus"]) > 100
    assert checks["nccl"]["status"] == "ok" and checks["nccl"]["correct"]
    assert checks["nccl"]["world_size"] == facts["gpu_count"]
    assert result["status"] in ("ok", "warn"), [
        c for c in result["checks"] if c["status"] == "fail"
    ]


def test_topology_names_a_link_for_every_pair_of_gpus(facts: dict[str, Any]) -> None:
    topo = facts["topology"]
    n = facts["gpu_count"]
    assert sorted(g["index"] for g in topo["gpus"]) == list(range(n))
    pairs = {(i, j) for i in range(n) for j in range(n) if i != j}
    assert {tuple(int(x) for x in k.split(",")) for k in topo["links"]} == pairs
    assert all(doctor.link_rank(v) < len(doctor.LINK_ORDER) for v in topo["links"].values())
    if n > 1:
        assert topo["interconnect"] and doctor.nccl_expectation(facts)["high"] > 0


def test_all_reduce_reports_bandwidth_against_the_expected_figure(facts: dict[str, Any]) -> None:
    if facts["gpu_count"] < 2:
        pytest.skip("one GPU: no link to measure")
    c = doctor.check_nccl(sys.executable, 256, 20, doctor.nccl_expectation(facts))
    assert c["correct"] and c["world_size"] == facts["gpu_count"]
    assert c["expected"]["link"] == facts["topology"]["interconnect"] or c["expected"]["link"] == "SYS"
    assert [r["size_mib"] for r in c["sizes"]] == [32, 256, 1024]
    # below 70% of the interconnect's low figure the doctor warns; a healthy host does not
    assert c["status"] == "ok", c["detail"]


def test_tuner_places_engines_on_the_real_gpus(facts: dict[str, Any]) -> None:
    hw = HostHardware.from_facts(facts)
    t = tune(preset("deepseek-v2-lite"), [hw], concurrency=64, max_model_len=4096)
    assert t.settings["tensor_parallel_size"] == 1
    assert [e.env["CUDA_VISIBLE_DEVICES"] for e in t.engines] == [
        str(g.index) for g in sorted(hw.gpus, key=lambda g: (g.numa_node, g.bus_id))
    ]


def test_gpu_roles_verify_the_host_and_change_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "GPU roles in verify mode",
                    "hosts": "all",
                    "gather_facts": True,
                    "gather_subset": ["min"],
                    "roles": GPU_ROLES,
                }
            ]
        )
    )
    results: list[dict[str, Any]] = []

    def handle(event: dict[str, Any]) -> bool:
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            data = event["event_data"]
            results.append({"task": data.get("task"), "res": data.get("res", {})})
        return True

    r = ansible_runner.run(
        private_data_dir=str(tmp_path),
        project_dir=str(project),
        playbook="play.yml",
        inventory="localhost ansible_connection=local",
        extravars={
            "engine_device": "gpu",
            "pli_bundle_dir": str(tmp_path / "no-bundle"),
            "pli_state_dir": str(tmp_path / "state"),
            "pli_root": str(tmp_path / "root"),
            "nvidia_driver_mode": "verify",
            "ansible_python_interpreter": sys.executable,
            "gpu_verify_torch_pythons": [sys.executable],
        },
        envvars={
            "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        },
        event_handler=handle,
        quiet=True,
        suppress_env_files=True,
    )
    text = "\n".join(f"{x['task']}: {x['res'].get('msg', '')}" for x in results)
    assert r.rc == 0, text
    stats = r.stats or {}
    assert not stats.get("changed") and not stats.get("failures"), stats
    assert "verified, nothing changed" in text
