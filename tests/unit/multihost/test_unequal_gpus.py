"""Unequal GPU counts across the serving hosts of one deployment are refused before any host
changes, wherever the counts come from: doctor facts (`installer plan`), preflight's probe with
gpu.count left out, and a declared gpu.count a host contradicts (its file:line) (#36)."""

from collections.abc import Callable

import pytest

from installer.base.errors import PreflightError
from installer.gpu.matrix import gpu_type
from installer.gpu.planner import preset
from installer.gpu.tuner import HostHardware, TuneError, tune
from installer.inventory import Inventory
from installer.preflight import gpu as preflight_gpu

H100 = "NVIDIA H100 80GB HBM3"


def facts(count: int) -> dict[str, str]:
    rows = ";".join(f"{H100}, 81559, 580.95.05" for _ in range(count))
    return {"gpu_smi": "yes", "gpu_rows": rows, "gpu_dev": str(count), "gpu_pci": str(count)}


def test_hosts_of_unequal_gpu_counts_are_refused_by_the_tuner_naming_both() -> None:
    hosts = [HostHardware.of_type("h0", gpu_type("h100"), 8), HostHardware.of_type("h1", gpu_type("h100"), 4)]
    with pytest.raises(TuneError) as caught:
        tune(preset("deepseek-v3"), hosts, concurrency=64, max_model_len=8192)
    assert str(caught.value) == (
        f"h1 has 4 x {H100}, h0 8 x {H100}; the serving hosts of one deployment must have the same GPUs, "
        "as many on each"
    )
    assert "deployment of its own" in caught.value.details[0]


def test_probed_hosts_of_unequal_gpu_counts_are_refused_at_preflight(two_hosts: Callable[..., Inventory]) -> None:
    inv = two_hosts()
    undeclared = inv.model_copy(update={"gpu": inv.gpu.model_copy(update={"type": None, "count": None})})
    with pytest.raises(PreflightError, match=r"different GPUs.*no host was changed") as caught:
        preflight_gpu.with_probed_hardware(undeclared, {"h0": facts(8), "h1": facts(4)})
    assert caught.value.details == [f"h0: 8x {H100}", f"h1: 4x {H100}"]


def test_a_host_short_of_the_declared_gpu_count_is_refused_with_its_line(two_hosts: Callable[..., Inventory]) -> None:
    inv = two_hosts()
    needs = preflight_gpu.needs(inv, [])
    assert preflight_gpu.judge(facts(8), needs) == []
    (problem,) = preflight_gpu.judge(facts(4), needs)
    assert "inventory.yml:7: gpu.count is 8 but the host has 4 GPU(s)" in problem
    assert "correct gpu.count" in problem
