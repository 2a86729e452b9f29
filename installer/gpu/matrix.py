"""Which NVIDIA driver a host needs: GPU generation <-> driver branch <-> CUDA version.

Three published facts decide it, and each table below cites where NVIDIA publishes it:

1. A CUDA toolkit release needs a minimum driver (CUDA_MIN_DRIVER).
2. A CUDA toolkit release compiles for some GPU generations only (CUDA_GENERATIONS).
3. A driver branch supports some GPU generations only (GENERATIONS: first/last branch).

`choose()` turns a (generation, CUDA) pair into a driver branch, or raises ImpossiblePair
with the reason and the fix; `plan_table()` precomputes that answer for every generation so
the `nvidia_driver` role can look it up on a host it has just probed, and fail before it
changes anything when the inventory asks for something no driver can do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from installer.base.errors import InstallerError


class ImpossiblePair(InstallerError):
    """No NVIDIA driver runs this CUDA version on this GPU generation."""


@dataclass(frozen=True)
class Generation:
    name: str
    # compute capabilities (major, minor) of the generation's chips
    compute_caps: tuple[tuple[int, int], ...]
    # first driver branch that supports it, and the last one (None: still supported)
    first_branch: int
    last_branch: int | None
    # Turing and later have the GSP that NVIDIA's open kernel modules need; Blackwell
    # supports only the open modules (NVIDIA driver README, "Open Linux Kernel Modules").
    open_modules: str  # "required", "supported" or "unsupported"
    fp8: bool = False  # FP8 tensor cores (Ada, Hopper, Blackwell)


# Branch bounds: the Unix driver deprecation schedule ("The 470 series is the last to support
# Kepler"; "The release 580 series will be the last to support GPUs based on the Maxwell,
# Pascal, and Volta architectures"); first branches from each generation's launch driver
# (A100: R450, Ada and H100: R525, B200 / RTX 50: R570).
GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("kepler", ((3, 5), (3, 7)), 0, 470, "unsupported"),
        Generation("maxwell", ((5, 0), (5, 2), (5, 3)), 0, 580, "unsupported"),
        Generation("pascal", ((6, 0), (6, 1), (6, 2)), 0, 580, "unsupported"),
        Generation("volta", ((7, 0), (7, 2)), 0, 580, "unsupported"),
        Generation("turing", ((7, 5),), 410, None, "supported"),
        Generation("ampere", ((8, 0), (8, 6), (8, 7)), 450, None, "supported"),
        Generation("ada", ((8, 9),), 525, None, "supported", fp8=True),
        Generation("hopper", ((9, 0),), 525, None, "supported", fp8=True),
        Generation(
            "blackwell", ((10, 0), (10, 3), (12, 0), (12, 1)), 570, None, "required", fp8=True
        ),
    )
}
GENERATION_ORDER = list(GENERATIONS)


def generation_of(compute_cap: str) -> str:
    """'9.0' -> 'hopper' (nvidia-smi --query-gpu=compute_cap, or torch's capability)."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", compute_cap)
    if not m:
        raise ValueError(f"not a compute capability: {compute_cap!r}")
    major, minor = int(m[1]), int(m[2])
    for gen in GENERATIONS.values():
        if (major, minor) in gen.compute_caps:
            return gen.name
    # a minor revision we do not list yet belongs to its major's generation
    by_major = {
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        8: "ampere",
        9: "hopper",
        10: "blackwell",
        11: "blackwell",
        12: "blackwell",
    }
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major in by_major:
        return by_major[major]
    raise ValueError(f"compute capability {compute_cap} is not an NVIDIA generation we know")


# Minimum Linux x86_64 driver for each CUDA toolkit release (its GA version), from NVIDIA's
# CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions".
# Per CUDA major, the floors are: CUDA 11.x >= 450.80.02 and 12.x >= 525.60.13 with "minor
# version compatibility" (Table 2), CUDA 13.x >= 580.65.06. We require the GA driver of the
# minor release, not the major's floor: minor-version compatibility excludes PTX JIT of newer
# PTX, and Triton/vLLM kernels are JIT-compiled on the host.
CUDA_MIN_DRIVER: dict[str, str] = {
    "11.0": "450.51.05",
    "11.1": "455.23",
    "11.2": "460.27.03",
    "11.3": "465.19.01",
    "11.4": "470.42.01",
    "11.5": "495.29.05",
    "11.6": "510.39.01",
    "11.7": "515.43.04",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}

# Generations each toolkit compiles for (its release notes, "Supported architectures"):
# CUDA 12.0 removed Kepler (sm_35/37); sm_89/sm_90 arrived in 11.8; Blackwell (sm_100,
# sm_120) in 12.8; CUDA 13.0 removed Maxwell, Pascal and Volta (sm_50..sm_72).
_PRE_ADA = ["maxwell", "pascal", "volta", "turing", "ampere"]


def cuda_generations(cuda: str) -> list[str]:
    major, minor = (int(x) for x in cuda.split("."))
    if major == 11:
        return ["kepler", *_PRE_ADA] + (["ada", "hopper"] if minor >= 8 else [])
    if major == 12:
        return [*_PRE_ADA, "ada", "hopper"] + (["blackwell"] if minor >= 8 else [])
    return ["turing", "ampere", "ada", "hopper", "blackwell"]


@dataclass(frozen=True)
class Branch:
    number: int
    lifecycle: str  # "ltsb" (long-term support), "pb" (production), "nfb" (new feature)
    end_of_life: date


# NVIDIA data center driver lifecycle ("Supported Drivers and CUDA Toolkit Versions", data
# center documentation): R535 LTSB to June 2026, R570 PB to February 2026, R580 LTSB to
# August 2028; R470 LTSB ended July 2024, R550 PB February 2025; R575 was a feature branch.
# A branch newer than R580 joins this table once NVIDIA designates it LTSB or PB.
BRANCHES: list[Branch] = [
    Branch(470, "ltsb", date(2024, 7, 31)),
    Branch(535, "ltsb", date(2026, 6, 30)),
    Branch(550, "pb", date(2025, 2, 28)),
    Branch(570, "pb", date(2026, 2, 28)),
    Branch(575, "nfb", date(2025, 8, 31)),
    Branch(580, "ltsb", date(2028, 8, 31)),
]
_LIFECYCLE_RANK = {"ltsb": 2, "pb": 1, "nfb": 0}


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def branch_of(driver_version: str) -> int:
    """'580.159.04' -> 580."""
    return version_tuple(driver_version)[0]


def supports(branch: int, generation: str) -> bool:
    gen = GENERATIONS[generation]
    return gen.first_branch <= branch and (gen.last_branch is None or branch <= gen.last_branch)


@dataclass(frozen=True)
class Choice:
    generation: str
    cuda: str
    branch: int
    min_driver: str
    kernel_modules: str  # "open" or "proprietary"
    lifecycle: str
    warnings: list[str] = field(default_factory=list)


def _check_cuda(cuda: str) -> None:
    if cuda not in CUDA_MIN_DRIVER:
        raise ImpossiblePair(
            f"CUDA {cuda} is not in the driver matrix; known versions: {', '.join(CUDA_MIN_DRIVER)}"
        )


def usable_cuda(generation: str) -> list[str]:
    """CUDA versions some driver branch can run on this generation."""
    last = GENERATIONS[generation].last_branch
    return [
        c
        for c, need in CUDA_MIN_DRIVER.items()
        if generation in cuda_generations(c) and (last is None or branch_of(need) <= last)
    ]


def kernel_modules(generation: str, branch: int) -> str:
    """Open modules where NVIDIA recommends them (Turing+, default since R560), else proprietary."""
    mode = GENERATIONS[generation].open_modules
    if mode == "required" or (mode == "supported" and branch >= 560):
        return "open"
    return "proprietary"


def choose(
    generation: str, cuda: str, *, pin: int | None = None, today: date | None = None
) -> Choice:
    """The driver branch for a GPU generation and a wanted CUDA version, or ImpossiblePair."""
    if generation not in GENERATIONS:
        raise ImpossiblePair(
            f"unknown GPU generation {generation!r}; known: {', '.join(GENERATIONS)}"
        )
    _check_cuda(cuda)
    today = today or date.today()
    gen = GENERATIONS[generation]
    if generation not in cuda_generations(cuda):
        usable = usable_cuda(generation)
        hint = (
            f"use a CUDA version from {usable[0]} to {usable[-1]}"
            if usable
            else "no CUDA release does"
        )
        raise ImpossiblePair(
            f"CUDA {cuda} does not support {generation} GPUs (compute capability "
            f"{'/'.join(f'{a}.{b}' for a, b in gen.compute_caps)}); {hint}"
        )
    need = CUDA_MIN_DRIVER[cuda]
    candidates = [
        b for b in BRANCHES if supports(b.number, generation) and b.number >= branch_of(need)
    ]
    if pin is not None:
        if not supports(pin, generation):
            last = (
                f"; the last branch for {generation} is R{gen.last_branch}"
                if gen.last_branch
                else ""
            )
            raise ImpossiblePair(f"driver branch R{pin} does not support {generation} GPUs{last}")
        if pin < branch_of(need):
            raise ImpossiblePair(
                f"CUDA {cuda} needs driver >= {need}; branch R{pin} is too old "
                f"(use R{branch_of(need)} or newer)"
            )
        known = {b.number: b for b in BRANCHES}
        chosen = known.get(pin, Branch(pin, "unknown", date.max))
    else:
        if not candidates:
            raise ImpossiblePair(
                f"no driver branch supports both {generation} GPUs (last branch "
                f"R{gen.last_branch}) and CUDA {cuda} (needs >= {need})"
            )
        chosen = max(
            candidates,
            key=lambda b: (b.end_of_life >= today, _LIFECYCLE_RANK[b.lifecycle], b.number),
        )
    warnings = []
    if chosen.end_of_life < today:
        warnings.append(
            f"R{chosen.number} reached end of life on {chosen.end_of_life}; "
            "it is the newest branch this GPU and CUDA version allow"
        )
    return Choice(
        generation,
        cuda,
        chosen.number,
        need,
        kernel_modules(generation, chosen.number),
        chosen.lifecycle,
        warnings,
    )


def driver_satisfies(installed: str, generation: str, cuda: str, *, pin: int | None = None) -> bool:
    """Is an installed driver right for this GPU and CUDA version (then it is left alone)?

    Right means: new enough for the CUDA version, a branch that supports the generation, and
    the pinned branch when the inventory pins one. A newer branch than we would choose is
    right too: replacing a working driver costs a reboot and buys nothing.
    """
    _check_cuda(cuda)
    branch = branch_of(installed)
    return (
        version_tuple(installed) >= version_tuple(CUDA_MIN_DRIVER[cuda])
        and supports(branch, generation)
        and (pin is None or branch == pin)
        and generation in cuda_generations(cuda)
    )


def plan_table(cuda: str, *, pin: int | None = None, today: date | None = None) -> dict[str, Any]:
    """The choice for every generation, for the nvidia_driver role (group_vars nvidia_driver_plan).

    The role probes a host, finds its generation, and looks it up here: `error` non-empty
    means fail before any change; otherwise install `branch` unless the installed driver is
    at least `min_driver`, within [first_branch, last_branch] (0: no last) and the pin.
    """
    _check_cuda(cuda)
    gens: dict[str, dict[str, Any]] = {}
    for name, gen in GENERATIONS.items():
        entry: dict[str, Any] = {
            "first_branch": gen.first_branch,
            "last_branch": gen.last_branch or 0,
            "cuda_ok": name in cuda_generations(cuda),
        }
        try:
            c = choose(name, cuda, pin=pin, today=today)
            entry.update(
                branch=c.branch,
                kernel_modules=c.kernel_modules,
                error="",
                warning="; ".join(c.warnings),
            )
        except ImpossiblePair as exc:
            entry.update(branch=0, kernel_modules="", error=str(exc), warning="")
        gens[name] = entry
    return {
        "cuda_version": cuda,
        "min_driver": CUDA_MIN_DRIVER[cuda],
        "branch_pin": pin or 0,
        "generations": gens,
    }


# Default CUDA version for GPU hosts: vLLM's current wheels are built with torch for CUDA 13.0
# (the H200 machine runs torch 2.11.0+cu130 with vllm 0.26.0); its driver floor is R580, the
# current long-term support branch.
DEFAULT_CUDA = "13.0"


@dataclass(frozen=True)
class GPUType:
    """A GPU model as nvidia-smi reports it (memory.total in MiB)."""

    key: str
    name: str
    memory_mib: int
    compute_cap: str
    nvlink: bool  # SXM/NVLink parts: tensor parallel across GPUs is cheap
    # Dense bf16 tensor-core peak from NVIDIA's datasheet (TFLOP/s, no sparsity); 0 where the
    # part has no bf16 tensor cores, so the GEMM gate has nothing to hold it to.
    peak_bf16_tflops: float = 0.0
    # NVLink bandwidth per GPU, both directions together, as NVIDIA's datasheet states it (GB/s;
    # 0 without NVLink). Sources: docs/multinode.md, "The GPUs' figures".
    nvlink_gbps: float = 0.0

    @property
    def generation(self) -> str:
        return generation_of(self.compute_cap)

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


# memory.total as nvidia-smi prints it; the H200 figure was read on the project's device
# machine (143771 MiB), the others are the boards' published capacities less the same
# driver-reserved share, rounded as nvidia-smi reports them on those boards.
GPU_TYPES: dict[str, GPUType] = {
    t.key: t
    for t in (
        # peaks: H100/H800/H200 SXM 989 (same GH100 silicon), H20 148, B200 2250, A100/A800 312,
        # L40S 362, L20 119.5, L4 121, A10 125 (datasheets); Volta and Turing have no bf16 cores
        GPUType("h200", "NVIDIA H200", 143771, "9.0", True, 989.0, nvlink_gbps=900),
        GPUType("h100", "NVIDIA H100 80GB HBM3", 81559, "9.0", True, 989.0, nvlink_gbps=900),
        GPUType("h800", "NVIDIA H800", 81559, "9.0", True, 989.0, nvlink_gbps=400),
        GPUType("h20", "NVIDIA H20", 97871, "9.0", True, 148.0, nvlink_gbps=900),
        GPUType("b200", "NVIDIA B200", 183359, "10.0", True, 2250.0, nvlink_gbps=1800),
        GPUType("a100-80g", "NVIDIA A100-SXM4-80GB", 81920, "8.0", True, 312.0, nvlink_gbps=600),
        GPUType("a100-40g", "NVIDIA A100-SXM4-40GB", 40960, "8.0", True, 312.0, nvlink_gbps=600),
        GPUType("a800", "NVIDIA A800-SXM4-80GB", 81920, "8.0", True, 312.0, nvlink_gbps=400),
        GPUType("l40s", "NVIDIA L40S", 46068, "8.9", False, 362.0),
        GPUType("l20", "NVIDIA L20", 46068, "8.9", False, 119.5),
        GPUType("l4", "NVIDIA L4", 23034, "8.9", False, 121.0),
        GPUType("a10", "NVIDIA A10", 23028, "8.6", False, 125.0),
        GPUType("v100-32g", "Tesla V100-SXM2-32GB", 32768, "7.0", True, nvlink_gbps=300),
        GPUType("t4", "Tesla T4", 15360, "7.5", False),
    )
}

# The GPU gate (role gpu_verify): a GPU whose bf16 GEMM runs below this share of its type's
# peak fails the host unless the inventory waives it (gpu.gate). A healthy Hopper runs an
# 8192^3 bf16 matmul near 0.8 of its peak; a throttled, power-capped or faulty one far below.
DEFAULT_GATE_SHARE = 0.6


def gpu_type_of_name(name: str) -> GPUType | None:
    """The type nvidia-smi's name stands for ('NVIDIA H200' -> h200); None when we do not know it."""
    k = name.strip().lower()
    return next((t for t in GPU_TYPES.values() if t.name.lower() == k), None)


def peak_tflops_by_name() -> dict[str, float]:
    """{nvidia-smi name: dense bf16 peak} for the doctor on the hosts (it imports nothing of ours)."""
    return {t.name: t.peak_bf16_tflops for t in GPU_TYPES.values() if t.peak_bf16_tflops}


def gpu_type(key_or_name: str) -> GPUType:
    """Look a GPU up by key ('h200') or by the name nvidia-smi prints ('NVIDIA H200')."""
    k = key_or_name.strip().lower()
    if k in GPU_TYPES:
        return GPU_TYPES[k]
    for t in GPU_TYPES.values():
        if t.name.lower() == k:
            return t
    raise InstallerError(f"unknown GPU type {key_or_name!r}; known: {', '.join(GPU_TYPES)}")


def group_vars(
    cuda: str = DEFAULT_CUDA,
    *,
    pin: int | None = None,
    gate_share: float = DEFAULT_GATE_SHARE,
    gate_waive: bool = False,
) -> dict[str, Any]:
    """Variables the GPU roles take from the installer (installer/ansible/render.py)."""
    return {
        "nvidia_driver_plan": plan_table(cuda, pin=pin),
        "cuda_version": cuda,
        "nccl_cuda_version": cuda,
        "gpu_verify_peak_tflops": peak_tflops_by_name(),
        "gpu_verify_min_share": gate_share,
        "gpu_verify_waive": gate_waive,
    }


def main() -> None:  # pragma: no cover - a maintainer's helper
    import json
    import sys

    cuda = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_CUDA
    print(json.dumps(plan_table(cuda), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
