"""The `gpu:` section: the NVIDIA stack of GPU hosts, the GPUs they hold, and the GEMM gate."""

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from installer.gpu import matrix as gpu_matrix
from installer.inventory.fields import LocalPath, Strict


class GPUGate(Strict):
    """The GPU gate (role gpu_verify, after the engine's environment is installed): each GPU's
    bf16 GEMM must reach min_share of its type's dense bf16 peak (installer/gpu/matrix.py)."""

    min_share: Annotated[float, Field(gt=0, le=1)] = gpu_matrix.DEFAULT_GATE_SHARE
    # true: a GPU below the gate is reported as a warning and the deployment goes on.
    waive: bool = False


class GPUStack(Strict):
    """The NVIDIA stack of GPU hosts (engine.device gpu): roles nvidia_driver, cuda, nccl.

    A CUDA version, GPU generation and driver branch that no NVIDIA driver can serve together
    are refused here, with the reason, before any host is touched (installer/gpu/matrix.py).
    """

    cuda: str = gpu_matrix.DEFAULT_CUDA  # major.minor the engines are built for
    # The hosts' GPU generation (hopper, ...), when known: checks the pair now, not on the host.
    generation: str | None = None
    driver_branch: Annotated[int, Field(ge=400, le=999)] | None = None  # pin, e.g. 570
    # forbid: a host whose new driver needs a reboot fails with what to do instead.
    reboot: Literal["allow", "forbid"] = "allow"
    # .debs of the driver, CUDA, NCCL and fabric manager downloaded from NVIDIA's repository;
    # `installer bundle build` puts them into the bundle's apt repository.
    packages_dir: LocalPath | None = None
    # The GPUs of each serving host (identical hosts): the engines are laid out and tuned for
    # them (installer/planning/engines.py). Left out, preflight fills them from what the hosts have;
    # declared, preflight refuses hosts that contradict them (installer/preflight/gpu.py).
    type: str | None = None  # a key of installer/gpu/matrix.py GPU_TYPES: h200, h100, a100-80g, l40s, ...
    count: Annotated[int, Field(ge=1, le=64)] | None = None
    numa_nodes: Annotated[int, Field(ge=1, le=16)] = 1  # CPU sockets the GPUs are spread over
    # One engine over this many serving hosts (a pipeline stage each, vLLM's Ray backend) even
    # where fewer hosts hold the model: to prove a Ray deployment on small GPUs (#36,
    # tests/gpu/host/ray2.yml), or to keep the layout of a larger site. Left out, the tuner
    # spans hosts only when one host is not enough (docs/multinode.md).
    pipeline_parallel_size: Annotated[int, Field(ge=2, le=64)] | None = None
    gate: GPUGate = GPUGate()

    @field_validator("type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        if value is not None and value not in gpu_matrix.GPU_TYPES:
            raise ValueError(f"unknown GPU type {value!r}; use one of {', '.join(gpu_matrix.GPU_TYPES)}")
        return value

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, value: str) -> str:
        if value not in gpu_matrix.CUDA_MIN_DRIVER:
            raise ValueError(
                f"CUDA {value} is not in the driver matrix; use one of {', '.join(gpu_matrix.CUDA_MIN_DRIVER)}"
            )
        return value

    @field_validator("generation")
    @classmethod
    def _generation(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if value not in gpu_matrix.GENERATIONS:
            raise ValueError(f"unknown GPU generation {value!r}; use one of {', '.join(gpu_matrix.GENERATIONS)}")
        cuda = info.data.get("cuda")
        if cuda:
            try:
                gpu_matrix.choose(value, cuda)
            except gpu_matrix.ImpossiblePair as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("driver_branch")
    @classmethod
    def _branch(cls, value: int | None, info: ValidationInfo) -> int | None:
        cuda = info.data.get("cuda")
        if value is None or not cuda:
            return value
        generations = [info.data["generation"]] if info.data.get("generation") else gpu_matrix.cuda_generations(cuda)
        reasons = []
        for gen in generations:
            try:
                gpu_matrix.choose(gen, cuda, pin=value)
                return value
            except gpu_matrix.ImpossiblePair as exc:
                reasons.append(str(exc))
        # "too old for this CUDA" holds for every generation; a generation's own limit only for it
        raise ValueError(next((r for r in reasons if "too old" in r), reasons[0]))
