"""The `engine:` section (vLLM's settings for every engine) and a `models:` entry's overrides of
it."""

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from installer.inventory.engine_env import EnvName, EnvValue
from installer.inventory.fields import Strict, matching, unset_dropped

# The Engine fields' types, shared with a model's overrides (ModelEngine).
MaxModelLen = Annotated[int, Field(ge=16, le=1_048_576)]
MaxNumSeqs = Annotated[int, Field(ge=1, le=4096)]
GPUMemoryShare = Annotated[float, Field(gt=0, le=1)]
TensorParallel = Annotated[int, Field(ge=1, le=64)]
KVCacheGiB = Annotated[int, Field(ge=1, le=1024)]
# vLLM-cpu's OpenMP thread binding (VLLM_CPU_OMP_THREADS_BIND): "auto" pins to the host's
# cores; "nobind" leaves placement to the kernel (lab hosts share one machine's cores, and two
# engines both pinned to core 0 starve each other); or a core list such as "0-31".
ThreadsBind = Annotated[str, matching(r"auto|nobind|[0-9,|-]+", "auto, nobind or a list of CPU cores such as 0-31")]
# GPU hosts only, and only when asked for: a CUDA PyTorch environment already on the hosts
# (cloud and NGC-style images) that the engine reuses instead of the bundle carrying torch and
# NVIDIA's CUDA wheels. The engine's venv is made from its bin/python3 and sees its packages
# behind its own (playbooks/roles/engine/tasks/host_torch.yml). An absolute path on the hosts.
HostTorch = Annotated[str, matching(
    r"(?!.*/\.\.?(?:/|$))/[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*",
    "an absolute path on the hosts of letters, digits, '.', '_', '+', '-' and '/', "
    "without '.' or '..' parts (e.g. /opt/torch/.venv)",
)]


class Engine(Strict):
    device: Literal["cpu", "gpu"] = "gpu"
    max_model_len: MaxModelLen = 4096
    max_num_seqs: MaxNumSeqs = 64
    gpu_memory_utilization: GPUMemoryShare = 0.9
    tensor_parallel_size: TensorParallel = 1
    # vLLM-cpu reserves this much RAM for the KV cache (VLLM_CPU_KVCACHE_SPACE, GiB).
    cpu_kvcache_space_gib: KVCacheGiB = 1
    cpu_omp_threads_bind: ThreadsBind = "auto"
    # vLLM-cpu runs the model in its engine-core process instead of a worker process of its own
    # (VLLM_ENABLE_V1_MULTIPROCESSING=0 with vLLM's uniprocess executor): one interpreter fewer
    # to start, and no worker spinning on a shared-memory queue between steps. Off by default as
    # upstream's CPU layout; the lab turns it on (docs/benchmarks.md, one process per engine).
    cpu_inline_worker: bool = False
    extra_args: list[str] = Field(default_factory=list)
    # fp8: online fp8 weights on GPUs that have fp8 (Hopper and later), for a bf16/fp16
    # checkpoint. Faster on the H200 (docs/benchmarks.md), but it changes the model's numerics,
    # so it is the user's choice, never derived (installer/gpu/tuner.py FP8_WHY). None: the
    # weights stay as the checkpoint has them.
    quantization: Literal["fp8"] | None = None
    host_torch: HostTorch | None = None
    # GPU engines: vLLM's FlashInfer top-p/top-k sampler builds its kernels on the engine's first
    # start (136 s of a 247 s first start on an H200, docs/gpu.md); PyTorch's sampler needs no
    # build and is only used by requests that set top_p or top_k. true: FlashInfer's.
    flashinfer_sampler: bool = False
    # Environment variables for the engines' units: switches vLLM, PyTorch and NCCL read only from
    # the environment (installer/inventory/engine_env.py says which names stay the installer's).
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _dump_sampler_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return unset_dropped(self, handler(self), ("flashinfer_sampler", "env"))

    @model_validator(mode="after")
    def _host_torch_on_gpu(self) -> "Engine":
        if self.host_torch is not None and self.device != "gpu":
            raise ValueError(
                "host_torch reuses a CUDA PyTorch on GPU hosts; remove it, or set device: gpu"
            )
        return self

    @model_validator(mode="after")
    def _inline_worker_on_cpu_unbound(self) -> "Engine":
        # (tensor_parallel_size above 1 on a CPU engine is refused by inventory_checks already)
        if self.cpu_inline_worker and self.device != "cpu":
            raise ValueError(
                "cpu_inline_worker is for vLLM-cpu engines; remove it, or set device: cpu"
            )
        if self.cpu_inline_worker and self.cpu_omp_threads_bind != "nobind":
            # vLLM binds OpenMP threads only as it starts a worker process
            # (vllm/v1/executor/multiproc_executor.py); inline, a binding would silently not apply
            raise ValueError(
                f"cpu_inline_worker leaves vLLM no worker process to bind, so cpu_omp_threads_bind "
                f"{self.cpu_omp_threads_bind} would not apply; set cpu_omp_threads_bind: nobind, or "
                "remove cpu_inline_worker"
            )
        return self


class ModelEngine(Strict):
    """A model's overrides of the top-level `engine` settings (the rest it takes from there).
    `device` is not one of them: every engine of a deployment runs on the same kind of hardware."""

    max_model_len: MaxModelLen | None = None
    max_num_seqs: MaxNumSeqs | None = None
    gpu_memory_utilization: GPUMemoryShare | None = None
    tensor_parallel_size: TensorParallel | None = None
    cpu_kvcache_space_gib: KVCacheGiB | None = None
    cpu_omp_threads_bind: ThreadsBind | None = None
    cpu_inline_worker: bool | None = None
    extra_args: list[str] | None = None
    quantization: Literal["fp8"] | None = None
    host_torch: HostTorch | None = None
    # GPU engines: vLLM's FlashInfer top-p/top-k sampler builds its kernels on the engine's first
    # start (136 s of a 247 s first start on an H200, docs/gpu.md); PyTorch's sampler needs no
    # build and is only used by requests that set top_p or top_k. true: FlashInfer's.
    flashinfer_sampler: bool = False
    env: dict[EnvName, EnvValue] | None = None  # replaces the top level's engine.env as a whole

    @model_validator(mode="before")
    @classmethod
    def _no_device(cls, data: Any) -> Any:
        if isinstance(data, dict) and "device" in data:
            raise ValueError(
                "device is deployment-wide: remove it here and set engine.device at the top level"
            )
        return data

    def over(self, defaults: Engine) -> Engine:
        """`defaults` with these overrides (checked again as a whole: host_torch needs a GPU)."""
        given = {**defaults.model_dump(include=defaults.model_fields_set), **self.model_dump(exclude_unset=True)}
        return Engine.model_validate(given)
