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
    group_gpus,
    tune,
    utilization_for,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"


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
    t = tune(preset("deepseek-r1-distill-llama-70b"), [hgx_h200()], concurrency=64, max_model_len=8192)
    assert t.settings["tensor_parallel_size"] == 4 and t.settings["engines_per_host"] == 2
    e0, e1 = t.engines
    assert (e0.gpus, e0.cpus, e0.numa_nodes, e0.port) == ([0, 1, 2, 3], "0-63", [0], 8000)
    assert (e1.gpus, e1.cpus, e1.numa_nodes, e1.port) == ([4, 5, 6, 7], "64-127", [1], 8001)
    assert e1.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert e0.args[:2] == ["--tensor-parallel-size", "4"]
    assert "--enable-prefix-caching" in e0.args and "--kv-cache-dtype" not in e0.args


def test_engines_sharing_a_socket_split_its_cores() -> None:
    t = tune(preset("deepseek-r1-distill-qwen-7b"), [hgx_h200()], concurrency=64, max_model_len=4096)
    assert t.settings["engines_per_host"] == 8
    assert [e.cpus for e in t.engines[:4]] == ["0-15", "16-31", "32-47", "48-63"]
    assert [e.env["CUDA_VISIBLE_DEVICES"] for e in t.engines] == [str(i) for i in range(8)]


def test_inventory_settings_win_over_derived_ones() -> None:
    t = tune(
        preset("deepseek-r1-distill-qwen-7b"),
        [hgx_h200()],
        concurrency=64, max_model_len=4096,
        max_num_seqs=32,
        gpu_memory_utilization=0.85,
    )
    assert (t.settings["max_num_seqs"], t.settings["gpu_memory_utilization"]) == (32, 0.85)
    assert t.why["max_num_seqs"] == "set in the inventory"


def test_max_model_len_is_capped_by_the_model() -> None:
    t = tune(preset("deepseek-r1-distill-qwen-7b"), [hgx_h200()], concurrency=64, max_model_len=262144)
    assert t.settings["max_model_len"] == 131072
    assert any("lowered" in n for n in t.notes)


def test_a_model_larger_than_a_host_uses_ray_pipeline_parallelism() -> None:
    hosts = [HostHardware.of_type(f"h{i}", gpu_type("h100"), 8, cpus=96, numa_nodes=2) for i in range(2)]
    t = tune(preset("deepseek-v3"), hosts, concurrency=64, max_model_len=8192)
    assert (t.settings["tensor_parallel_size"], t.settings["pipeline_parallel_size"]) == (8, 2)
    assert t.ray is not None and t.ray.head == "h0" and t.ray.workers == ["h1"]
    # Ray joins a worker to the head's ip:port, which only the inventory knows: the tuner names
    # the hosts and the pinned GCS port (not Redis's 6379), installer/planning/engines.py writes the argv.
    assert t.ray.port == 6390 and not hasattr(t.ray, "worker_argv")
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
            concurrency=64, max_model_len=4096,
        )


def test_mixed_gpus_are_refused() -> None:
    gpus = (
        HostGPU(0, "NVIDIA H200", 143771, "9.0", 0, "18"),
        HostGPU(1, "NVIDIA H100 80GB HBM3", 81559, "9.0", 0, "2a"),
    )
    with pytest.raises(TuneError, match="mixed GPUs"):
        tune(preset("deepseek-v2-lite"), [HostHardware("x", gpus, {0: (0, 1)})], concurrency=64, max_model_len=4096)


def test_from_doctor_facts_of_a_real_probe() -> None:
    """Facts as `doctor facts` builds them, from the H200 capture."""
    query = FIXTURES / "h200_r580" / "query.csv"
    gpus = doctor.parse_smi_csv(query.read_text(), doctor.SMI_FIELDS)
    for g in gpus:
        g["numa_node"] = 0
    facts = {"host": "probe", "gpus": gpus, "numa_nodes": {"0": "0-15"}}
    hw = HostHardware.from_facts(json.loads(json.dumps(facts)))
    assert len(hw.gpus) == len(gpus) and hw.numa_cpus == {0: tuple(range(16))}
    t = tune(preset("deepseek-v2-lite"), [hw], concurrency=64, max_model_len=4096)
    assert t.settings["tensor_parallel_size"] == 1 and len(t.engines) == len(gpus)


def test_hopper_captures_cuda_graphs_only_up_to_max_num_seqs() -> None:
    """Measured on the H200 (benchmarks/results/h200_tuning.json): half the capture sizes, the
    same throughput; decode batches never exceed max_num_seqs."""
    t = tune(
        preset("deepseek-v2-lite"),
        [HostHardware.of_type("h", gpu_type("h200"), 1)],
        concurrency=64, max_model_len=4096,
        max_num_seqs=64,
    )
    args = t.engines[0].args
    i = args.index("--max-cudagraph-capture-size")
    assert args[i + 1] == "64" == args[args.index("--max-num-seqs") + 1]
    assert t.settings["max_cudagraph_capture_size"] == 64 and "capture" in t.why["max_cudagraph_capture_size"]
    # the settings measured and not adopted stay vLLM's: attention and MoE backends, fp8
    assert not {"--attention-backend", "--moe-backend", "--kv-cache-dtype", "--quantization",
                "--max-num-batched-tokens"} & set(args)
    assert t.engines[0].env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}


def test_other_generations_keep_vllms_cuda_graph_sizes() -> None:
    for gpu in ("a100-80g", "l40s", "b200"):
        host = HostHardware.of_type("a", gpu_type(gpu), 1)
        t = tune(preset("deepseek-r1-distill-qwen-7b"), [host], concurrency=64, max_model_len=4096)
        assert "--max-cudagraph-capture-size" not in t.engines[0].args, gpu
        assert "max_cudagraph_capture_size" not in t.settings


# ---------------------------------------------------------------- topology-aware grouping


def _host_from_topo(
    path: Path, gpu: str = "NVIDIA H200", mib: int = 143771, numa_from_topo: bool = False
) -> HostHardware:
    """A host as HostHardware.from_facts sees it: GPUs of one type, the parsed link matrix."""
    topo = doctor.parse_topo(path.read_text())
    gpus = [
        {"index": g["index"], "name": gpu, "memory.total": mib, "compute_cap": "9.0",
         "numa_node": g["numa_affinity"] if numa_from_topo else -1, "pci.bus_id": f"0000:{g['index']:02x}:00.0"}
        for g in topo["gpus"]
    ]
    return HostHardware.from_facts({"host": "h", "gpus": gpus, "numa_nodes": {"0": "0-31", "1": "32-63"},
                                    "topology": topo})


def test_tp_groups_follow_the_links_not_the_bus_order() -> None:
    """4 GPUs, NUMA unknown (a VM reports -1): bus order would pair 0+1 and 2+3 across the
    sockets (SYS); the matrix pairs each GPU with its PHB neighbour."""
    host = _host_from_topo(FIXTURES / "synthetic_pcie_4gpu_interleaved_topo.txt")
    assert [[g.index for g in grp] for grp in group_gpus(host, 2, 2)] == [[0, 2], [1, 3]]
    assert [[g.index for g in grp] for grp in group_gpus(host, 4, 1)] == [[0, 1, 2, 3]]
    # without the matrix: consecutive GPUs in bus order, as before
    bare = HostHardware(host.name, host.gpus, host.numa_cpus)
    assert [[g.index for g in grp] for grp in group_gpus(bare, 2, 2)] == [[0, 1], [2, 3]]


def test_tp2_engines_take_the_nvlink_pairs_and_tp4_stays_on_a_socket() -> None:
    host = _host_from_topo(FIXTURES / "synthetic_a100_8gpu_pairs" / "topo_m.txt", numa_from_topo=True)
    pairs = [[g.index for g in grp] for grp in group_gpus(host, 2, 4)]
    assert pairs == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(host.link(a, b) == "NV12" for a, b in pairs)
    fours = [[g.index for g in grp] for grp in group_gpus(host, 4, 2)]
    assert fours == [[0, 1, 2, 3], [4, 5, 6, 7]]  # NODE inside a socket, never SYS
    # with idle GPUs left over (3 engines of 2 on 8 GPUs) the pairs are still NVLink pairs
    assert all(host.link(g[0].index, g[1].index) == "NV12" for g in group_gpus(host, 2, 3))


def test_a_pcie_only_tp_group_is_named_in_the_notes() -> None:
    """A 70B model needs two H200s; over PHB the tuner places it, and says what that costs."""
    host = _host_from_topo(FIXTURES / "synthetic_pcie_4gpu_interleaved_topo.txt", numa_from_topo=True)
    t = tune(preset("deepseek-r1-distill-llama-70b"), [host], concurrency=64, max_model_len=8192, max_num_seqs=8)
    assert t.settings["tensor_parallel_size"] == 2
    assert [e.gpus for e in t.engines] == [[0, 2], [1, 3]]
    assert [e.numa_nodes for e in t.engines] == [[0], [1]]
    assert [e.cpus for e in t.engines] == ["0-31", "32-63"]
    assert any("only over PHB" in n and "CPU sockets" not in n for n in t.notes)


def test_the_real_h200_facts_give_one_pinned_engine() -> None:
    facts = json.loads((FIXTURES / "h200_r580" / "doctor_facts.json").read_text())
    hw = HostHardware.from_facts(facts)
    assert hw.links == {} and [g.numa_node for g in hw.gpus] == [0]
    t = tune(preset("deepseek-v2-lite"), [hw], concurrency=64, max_model_len=4096)
    (e,) = t.engines
    assert e.gpus == [0] and e.numa_nodes == [0] and e.cpus == "0-15"


def test_the_real_two_gpu_h200_facts_place_tp2_over_nvlink() -> None:
    """Facts from `installer doctor` on the two-GPU H200 machine (2026-11-29): a model that fits
    one GPU gets one engine per GPU, each on its own half of the CPUs; a 70B model gets TP 2
    over the NV18 link."""
    (host,) = json.loads((FIXTURES / "h200x2_r580" / "doctor_check.json").read_text())["hosts"]
    hw = HostHardware.from_facts(host["facts"])
    assert hw.link(0, 1) == "NV18"
    lite = tune(preset("deepseek-v2-lite"), [hw], concurrency=64, max_model_len=4096)
    assert [(e.gpus, e.cpus, e.env["CUDA_VISIBLE_DEVICES"]) for e in lite.engines] == [
        ([0], "0-15", "0"), ([1], "16-31", "1")]
    big = tune(preset("deepseek-r1-distill-llama-70b"), [hw], concurrency=64, max_model_len=8192)
    (e,) = big.engines
    assert big.settings["tensor_parallel_size"] == 2 and e.gpus == [0, 1] and e.cpus == "0-31"


# ---------------------------------------------------------------- fp8 weights: an explicit opt-in


def test_fp8_weights_only_when_asked_for() -> None:
    """Measured on H200s (benchmarks/results/h200_side_by_side_20261130_x2.json): with 16384
    batched tokens 1.30-1.33x output tok/s at concurrency 64 and TTFT p99 no worse, but changed
    numerics, so never derived for speed: the bf16 plan says how to ask for it."""
    h200 = [HostHardware.of_type("h", gpu_type("h200"), 1)]
    plain = tune(preset("deepseek-v2-lite"), h200, concurrency=64, max_model_len=4096)
    fast = tune(preset("deepseek-v2-lite"), h200, concurrency=64, max_model_len=4096, quantization="fp8")
    assert "--quantization" not in plain.engines[0].args and plain.settings["quantization"] is None
    args = fast.engines[0].args
    assert args[args.index("--quantization") + 1] == "fp8" and fast.settings["quantization"] == "fp8"
    assert "numerics" in fast.why["quantization"]
    # fp8 on Hopper prefills in bigger steps (its TTFT p99 was worse with vLLM's 8192); bf16 keeps 8192
    assert args[args.index("--max-num-batched-tokens") + 1] == "16384"
    assert fast.settings["max_num_batched_tokens"] == 16384 and "TTFT" in fast.why["max_num_batched_tokens"]
    assert "--max-num-batched-tokens" not in plain.engines[0].args
    # the bf16 plan names the opt-in and its cost; the fp8 one, an fp8 checkpoint and an A100 do not
    assert [n for n in plain.notes if "engine.quantization: fp8" in n and "numerics" in n]
    assert not [n for n in fast.notes if "engine.quantization" in n]
    v3 = tune(preset("deepseek-v3"), [hgx_h200(), hgx_h200("gpu2")], concurrency=64, max_model_len=4096)
    a100 = tune(preset("deepseek-v2-lite"), [HostHardware.of_type("a", gpu_type("a100-80g"), 1)],
                concurrency=64, max_model_len=4096)
    assert not [n for n in v3.notes + a100.notes if "engine.quantization" in n]
    # half the expert bytes: more of the GPU left for the KV cache
    assert fast.settings["kv_tokens_per_engine"] > plain.settings["kv_tokens_per_engine"]


def test_fp8_weights_are_refused_where_they_cannot_be_had() -> None:
    with pytest.raises(TuneError, match="no fp8 tensor cores"):
        tune(preset("deepseek-v2-lite"), [HostHardware.of_type("a", gpu_type("a100-80g"), 1)],
             concurrency=64, max_model_len=4096, quantization="fp8")
    with pytest.raises(TuneError, match="already fp8"):
        tune(preset("deepseek-v3"), [hgx_h200(), hgx_h200("gpu2")], concurrency=64, max_model_len=4096,
             quantization="fp8")
    with pytest.raises(TuneError, match="'int4' is not one the tuner sets"):
        tune(preset("deepseek-v2-lite"), [hgx_h200()], concurrency=64, max_model_len=4096, quantization="int4")
