"""`engine.env`: environment variables the inventory adds to its engines' units.

vLLM, PyTorch and NCCL read many switches only from the environment (NCCL_SOCKET_IFNAME,
VLLM_USE_DEEP_GEMM, ...). Each one becomes an `Environment=` line of the engine's unit, so names
and values are kept to characters a unit line takes as they are: no quoting, no `%` specifiers,
no `$` expansion, no spaces that would split one assignment into two.

The names the installer sets itself are refused: its engine.env file (EnvironmentFile=) would
win over a unit's Environment= line without a word, and each has a setting of its own.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_VALUE = re.compile(r"[A-Za-z0-9._,:/=+@^-]{0,1024}")

# name (or prefix ending in "*") -> what to do instead
OWNED: dict[str, str] = {
    "HF_HUB_OFFLINE": "hosts are air-gapped: the installer keeps every hub client offline",
    "TRANSFORMERS_OFFLINE": "hosts are air-gapped: the installer keeps every hub client offline",
    "VLLM_NO_USAGE_STATS": "hosts never send usage statistics",
    "DO_NOT_TRACK": "hosts never send usage statistics",
    "HOME": "the engine's home is its cache folder (pli_cache_dir)",
    "XDG_CACHE_HOME": "every compile cache lives in the engine's cache folder",
    "VLLM_CACHE_ROOT": "every compile cache lives in the engine's cache folder",
    "TORCHINDUCTOR_CACHE_DIR": "every compile cache lives in the engine's cache folder",
    "TRITON_CACHE_DIR": "every compile cache lives in the engine's cache folder",
    "FLASHINFER_WORKSPACE_BASE": "every compile cache lives in the engine's cache folder",
    "CUDA_CACHE_PATH": "every compile cache lives in the engine's cache folder",
    "CUDA_CACHE_MAXSIZE": "every compile cache lives in the engine's cache folder",
    "TORCH_EXTENSIONS_DIR": "every compile cache lives in the engine's cache folder",
    "PYTHONPYCACHEPREFIX": "every compile cache lives in the engine's cache folder",
    "PATH": "the release's venv comes first; engine.host_torch adds a PyTorch environment",
    # PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONINSPECT, PYTHONBREAKPOINT: code or a prompt the
    # engine would run besides the release's
    "PYTHON*": "the engine runs the release's venv as it is; engine.host_torch adds a PyTorch environment",
    # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT; GCONV_PATH loads modules too
    "LD_*": "the engine loads only the release's and the driver's libraries",
    "GCONV_PATH": "the engine loads only the release's and the driver's libraries",
    # the gateway is the engine's only client and holds the keys; answers stay out of the journal
    "VLLM_API_KEY": "the gateway is the engine's only client (mutual TLS on the network); set keys with installer keys",
    "VLLM_DEBUG_LOG_API_SERVER_RESPONSE": "answers stay out of logs (audit.retain keeps them, redacted, if asked)",
    "VLLM_SERVER_DEV_MODE": "the engine serves the OpenAI API only, no development endpoints",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "the engine never unpickles what reaches it",
    "VLLM_HOST_IP": "the installer binds vLLM's internal sockets (loopback, or the host's address with Ray)",
    "RAY_*": "the installer sets Ray's address and token authentication",
    "CUDA_VISIBLE_DEVICES": "the tuner places engines on GPUs (engine.tensor_parallel_size, hosts' gpus)",
    "CUDA_DEVICE_ORDER": "the tuner places engines on GPUs by PCI bus id",
    "VLLM_CPU_KVCACHE_SPACE": "set engine.cpu_kvcache_space_gib",
    "VLLM_CPU_OMP_THREADS_BIND": "set engine.cpu_omp_threads_bind",
    "VLLM_USE_FLASHINFER_SAMPLER": "set engine.flashinfer_sampler",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "set engine.cpu_inline_worker",
    "OTEL_*": "set monitoring.otlp_endpoint",
}


def owned_reason(name: str) -> str | None:
    """Why the installer keeps `name` to itself; None when the inventory may set it."""
    for key, why in OWNED.items():
        if name == key or (key.endswith("*") and name.startswith(key[:-1])):
            return why
    return None


def _matching(pattern: re.Pattern[str], text: str, what: str) -> str:
    """`text`, whole by `pattern`; else the error says what it should have been."""
    if not pattern.fullmatch(text):
        raise ValueError(f"{text!r} is not {what}")
    return text


def _check_name(name: str) -> str:
    _matching(_NAME, name, "an environment variable name: capitals, digits and '_', not starting "
                           "with a digit (e.g. NCCL_SOCKET_IFNAME)")
    why = owned_reason(name)
    if why is not None:
        raise ValueError(f"{name} is set by the installer ({why}); remove it from engine.env")
    return name


def _check_value(value: str) -> str:
    return _matching(_VALUE, value, "a value an engine unit takes as it is: up to 1024 letters, digits and "
                                    "'.', '_', ',', ':', '/', '=', '+', '@', '^', '-' (no spaces, quotes, '%' "
                                    "or '$'); quote numbers in YAML (\"0\")")


EnvName = Annotated[str, AfterValidator(_check_name)]
EnvValue = Annotated[str, AfterValidator(_check_value)]
