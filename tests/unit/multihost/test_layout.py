"""`installer plan` for DeepSeek-V3/R1 on two 8-GPU hosts: which ranks on which host, over which
links, and why, for H100, H200, H20 and A800 hosts, fp8 and bf16 checkpoints (#36)."""

from collections.abc import Callable

import pytest

from installer.base.errors import InventoryError
from installer.cli import terraform as tf_cli
from installer.cli.ui import console
from installer.flows import gpu_fit
from installer.gpu import multihost
from installer.inventory import Inventory
from installer.preparation import inventory_checks

PIPELINE = "pipeline across hosts (vLLM's Ray backend)"


def plan_text(inv: Inventory) -> str:
    with console.capture() as cap:
        tf_cli.print_fit_section(inv)
    return cap.get()


def layout_of(inv: Inventory) -> multihost.HostsLayout:
    found = gpu_fit.fit(inv)
    assert found is not None and found.tuned is not None, found
    spread = found.layout()
    assert spread is not None
    return spread


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-r1"])
@pytest.mark.parametrize(("gpu", "bf16", "weights"), [
    ("h100", False, "fp8"),  # the fp8 checkpoint: 16 x 80 GB
    ("h100", True, "fp8"),  # bf16 does not fit 16 x 80 GB with a KV cache: fp8 online, said why
    ("h20", False, "fp8"),
    ("h20", True, "fp8"),
    ("h200", True, "bf16"),  # bf16 over 16 x 141 GB, no quantization
])
def test_two_hosts_split_into_two_pipeline_stages_of_tp8(
    two_hosts: Callable[..., Inventory], model: str, gpu: str, bf16: bool, weights: str
) -> None:
    inv = two_hosts(gpu=gpu, preset=model, bf16=bf16)
    spread = layout_of(inv)
    assert (spread.tp, spread.pp, spread.kind) == (8, 2, PIPELINE)
    head, worker = spread.placements
    # vLLM's ranks pp_rank * 8 + tp_rank; stage 0 on the Ray head, which runs the engine
    assert (head.host, head.address, head.role, head.ranks, head.layers) == (
        "h0", "10.0.0.1", "Ray head + engine", tuple(range(8)), (0, 31))
    assert (worker.host, worker.address, worker.role, worker.ranks, worker.layers) == (
        "h1", "10.0.0.2", "Ray worker", tuple(range(8, 16)), (31, 61))
    assert head.gpus == worker.gpus == tuple(range(8))
    assert head.link.startswith("NVLink") and "900 GB/s" in head.link
    assert "10.0.0.1:6390" in spread.between and "NCCL over the hosts' network" in spread.between
    why = " | ".join(spread.why)
    assert "one host is not enough" in why and "inside a host's NVLink domain" in why
    assert ("fp8 weights" in why) == (weights == "fp8" and bf16)
    assert any(n.startswith("TP 16 over both hosts") for n in spread.not_chosen)
    assert any(n.startswith("DP 16 + expert parallel") for n in spread.not_chosen)
    # and the plan prints it, with the engine's argv that `up` deploys
    text = plan_text(inv)
    assert "layout: TP 8 x PP 2, pipeline across hosts" in text
    assert "h1 (10.0.0.2), Ray worker: stage 1: ranks 8-15, layers 31-60 on GPUs 0,1,2,3,4,5,6,7" in text
    argv = inventory_checks.check_inventory(inv).hosts[0].engines[0].argv
    assert ("--quantization" in argv) == (weights == "fp8" and bf16)
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-r1"])
def test_fp8_on_h200_fits_one_host_so_each_host_is_a_replica(
    two_hosts: Callable[..., Inventory], model: str
) -> None:
    inv = two_hosts(gpu="h200", preset=model)
    spread = layout_of(inv)
    assert (spread.tp, spread.pp, spread.kind) == (8, 1, "replicas")
    assert [(p.host, p.role, p.gpus, p.stage) for p in spread.placements] == [
        ("h0", "1 engine(s)", tuple(range(8)), None), ("h1", "1 engine(s)", tuple(range(8)), None)]
    assert "no model traffic" in spread.between
    plan = inventory_checks.check_inventory(inv)
    assert all(h.ray is None for h in plan.hosts) and len(plan.upstreams) == 2


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-r1"])
def test_a800_hosts_are_refused_for_either_checkpoint_saying_why(
    two_hosts: Callable[..., Inventory], model: str
) -> None:
    # fp8 weights need fp8 tensor cores (Ampere has none): refused when the inventory is read
    with pytest.raises(InventoryError) as caught:
        two_hosts(gpu="a800", preset=model)
    assert "no fp8 tensor cores" in " ".join(caught.value.details) + str(caught.value)
    # bf16 is about 1.3 TB of weights, more than 16 x 80 GB with a KV cache: a third host
    inv = two_hosts(gpu="a800", preset=model, bf16=True)
    text = plan_text(inv)
    assert "does not fit on 2 host(s) of 8 x a800; needs 3 hosts of 8 x a800" in text


def test_layer_split_is_vllms() -> None:
    # vllm/distributed/utils.py get_pp_indices: the remainder goes to the stages before the last
    assert multihost.layer_split(61, 2) == [(0, 31), (31, 61)]
    assert multihost.layer_split(61, 3) == [(0, 20), (20, 41), (41, 61)]
    assert multihost.layer_split(2, 2) == [(0, 1), (1, 2)]


def test_one_host_has_no_multi_host_layout(two_hosts: Callable[..., Inventory]) -> None:
    found = gpu_fit.fit(two_hosts(gpu="h200", preset="deepseek-r1-distill-llama-70b"))
    assert found is not None and found.tuned is not None
    assert multihost.describe(found.spec, found.tuned, found.hosts[:1]) is None  # type: ignore[arg-type]


def test_a_probed_tp_group_names_its_worst_link() -> None:
    from installer.gpu.matrix import gpu_type
    from installer.gpu.tuner import HostHardware

    hw = HostHardware.of_type("h0", gpu_type("h100"), 4)
    nv = HostHardware(hw.name, hw.gpus, hw.numa_cpus, {(0, 1): "NV18", (0, 2): "NV18", (0, 3): "SYS",
                                                        (1, 2): "NV18", (1, 3): "NV18", (2, 3): "NV18"})
    assert multihost.tp_link(nv, (0, 1, 2), gpu_type("h100")) == "NVLink (NV18, probed)"
    assert multihost.tp_link(nv, (0, 1, 2, 3), gpu_type("h100")) == "PCIe/CPU (SYS, probed)"
    assert multihost.tp_link(hw, (0, 1), gpu_type("l40s")) == "PCIe (NVIDIA L40S has no NVLink)"


def test_small_engines_on_two_hosts_are_replicas_of_one_gpu(two_hosts: Callable[..., Inventory]) -> None:
    spread = layout_of(two_hosts(gpu="h200", preset="deepseek-r1-distill-qwen-7b"))
    assert (spread.tp, spread.kind) == (1, "replicas")
    assert spread.placements[1].line() == (
        "h1 (10.0.0.2), 8 engine(s): one GPU per engine on GPUs 0,1,2,3,4,5,6,7")
