"""Engine layout and vLLM flags derived from a host's GPUs and NUMA topology."""

import json
from pathlib import Path

import pytest

from installer.gpu import doctor
from installer.gpu.matrix import gpu_type
from installer.gpu.planner import preset
from installer.gpu.tuner import (
    HostGPU,
    HostHardware,
    TuneError,
    derive_max_num_seqs,
    tune,
    utilization_for,
)

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def hgx_h200(name: str = "gpu1") -> HostHardware:
    # an HGX board: GPUs 0-3 on socket 0, 4-7 on socket 1, 64 cores each
    return HostHardware.of_type(name, gpu_type("h200"), 8, cpus=128, numa_nodes=2)


def test_utilization_leaves_a_fixed_reserve() -> None:
    assert utilization_for(143771) == 0.94  # H200: 1 - 8/140.4 = 0.943
    assert utilization_for(81559) == 0.90  # H100: 1 - 8/79.6 = 0.90, vLLM's default
    assert utilization_for(23034) == 0.80  # L4: the floor, 1 - 8/22.5 would be 0.64


def test_max_num_seqs_is_half_length_sequences_in_the_kv_cache() -> None:
    assert derive_max_num_seqs(1_000_000, 8192) == 128  # 244 half-length sequences -> 128
    assert derive_max_num_seqs(10_000_000, 4096) == 256  # capped at vLLM's default
    assert derive_max_num_seqs(50_000, 32768) == 16  # floor


def test_two_tp4_engines_on_an_8_gpu_host_each_on_its_own_socket() -> None:
    t = tune(preset("deepseek-r1-distill-llama-70b"), [hgx_h200()], max_model_len=8192)
    assert t.settings["tensor_parallel_size"] == 4 and t.settings["engines_per_host"] == 2
    e0, e1 = t.engines
    assert (e0.gpus, e0.cpus, e0.numa_nodes, e0.port) == ([0, 1, 2, 3], "0-63", [0], 8000)
    assert (e1.gpus, e1.cpus, e1.numa_nodes, e1.port) == ([4, 5, 6, 7], "64-127", [1], 8001)
    assert e1.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert e0.args[:2] == ["--tensor-parallel-size", "4"]
    assert "--enable-prefix-caching" in e0.args and "--kv-cache-dtype" not in e0.args


def test_engines_sharing_a_socket_split_its_cores() -> None:
    t = tune(preset("deepseek-r1-distill-qwen-7b"), [hgx_h200()], max_model_len=4096)
    assert t.settings["engines_per_host"] == 8
    assert [e.cpus for e in t.engines[:4]] == ["0-15", "16-31", "32-47", "48-63"]
    assert [e.env["CUDA_VISIBLE_DEVICES"] for e in t.engines] == [str(i) for i in range(8)]


def test_inventory_settings_win_over_derived_ones() -> None:
    t = tune(
        preset("deepseek-r1-distill-qwen-7b"),
        [hgx_h200()],
        max_model_len=4096,
        max_num_seqs=32,
        gpu_memory_utilization=0.85,
    )
    assert (t.settings["max_num_seqs"], t.settings["gpu_memory_utilization"]) == (32, 0.85)
    assert t.why["max_num_seqs"] == "set in the inventory"


def test_max_model_len_is_capped_by_the_model() -> None:
    t = tune(preset("deepseek-r1-distill-qwen-7b"), [hgx_h200()], max_model_len=262144)
    assert t.settings["max_model_len"] == 131072
    assert any("lowered" in n for n in t.notes)


def test_a_model_larger_than_a_host_uses_ray_pipeline_parallelism() -> None:
    hosts = [HostHardware.of_type(f"h{i}", gpu_type("h100"), 8, cpus=96, numa_nodes=2) for i in range(2)]
    t = tune(preset("deepseek-v3"), hosts, max_model_len=8192)
    assert (t.settings["tensor_parallel_size"], t.settings["pipeline_parallel_size"]) == (8, 2)
    assert t.ray is not None and t.ray.head == "h0" and t.ray.workers == ["h1"]
    assert "--address=h0:6379" in t.ray.worker_argv
    (engine,) = t.engines
    assert engine.host == "h0"
    assert engine.args[-4:] == [
        "--pipeline-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
    ]


def test_too_little_hardware_is_an_error_naming_what_is_missing() -> None:
    with pytest.raises(TuneError, match="needs 2 hosts of 8 x h100"):
        tune(
            preset("deepseek-v3"),
            [HostHardware.of_type("h0", gpu_type("h100"), 8)],
            max_model_len=4096,
        )


def test_mixed_gpus_are_refused() -> None:
    gpus = (
        HostGPU(0, "NVIDIA H200", 143771, "9.0", 0, "18"),
        HostGPU(1, "NVIDIA H100 80GB HBM3", 81559, "9.0", 0, "2a"),
    )
    with pytest.raises(TuneError, match="mixed GPUs"):
        tune(preset("deepseek-v2-lite"), [HostHardware("x", gpus, {0: (0, 1)})], max_model_len=4096)


def test_from_doctor_facts_of_a_real_probe() -> None:
    """Facts as `doctor facts` builds them, from the H200 capture."""
    query = FIXTURES / "h200_r580" / "query.csv"
    gpus = doctor.parse_smi_csv(query.read_text(), doctor.SMI_FIELDS)
    for g in gpus:
        g["numa_node"] = 0
    facts = {"host": "probe", "gpus": gpus, "numa_nodes": {"0": "0-15"}}
    hw = HostHardware.from_facts(json.loads(json.dumps(facts)))
    assert len(hw.gpus) == len(gpus) and hw.numa_cpus == {0: tuple(range(16))}
    t = tune(preset("deepseek-v2-lite"), [hw], max_model_len=4096)
    assert t.settings["tensor_parallel_size"] == 1 and len(t.engines) == len(gpus)


def test_hopper_captures_cuda_graphs_only_up_to_max_num_seqs() -> None:
    """Measured on the H200 (benchmarks/results/h200_tuning.json): half the capture sizes, the
    same throughput; decode batches never exceed max_num_seqs."""
    t = tune(
        preset("deepseek-v2-lite"),
        [HostHardware.of_type("h", gpu_type("h200"), 1)],
        max_model_len=4096,
        max_num_seqs=64,
    )
    args = t.engines[0].args
    i = args.index("--max-cudagraph-capture-size")
    assert args[i + 1] == "64" == args[args.index("--max-num-seqs") + 1]
    assert t.settings["max_cudagraph_capture_size"] == 64 and "capture" in t.why["max_cudagraph_capture_size"]
    # the settings measured and not adopted stay vLLM's: attention and MoE backends, fp8
    assert not {"--attention-backend", "--moe-backend", "--kv-cache-dtype", "--quantization"} & set(args)
    assert t.engines[0].env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}


def test_other_generations_keep_vllms_cuda_graph_sizes() -> None:
    for gpu in ("a100-80g", "l40s", "b200"):
        host = HostHardware.of_type("a", gpu_type(gpu), 1)
        t = tune(preset("deepseek-r1-distill-qwen-7b"), [host], max_model_len=4096)
        assert "--max-cudagraph-capture-size" not in t.engines[0].args, gpu
        assert "max_cudagraph_capture_size" not in t.settings
