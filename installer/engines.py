"""The engine instances of a host: the ONE place that says which vLLM services a host runs.

A CPU host, or a GPU deployment whose inventory does not describe its GPUs (gpu.type and
gpu.count), runs one engine: unit `private-llm-engine` on ports.engine, as always. With the
GPUs described, installer/gpu/tuner.py lays the model out on them: several engines per host
when the model fits on fewer GPUs (units private-llm-engine, private-llm-engine-1, ... on
consecutive ports, each with its CUDA_VISIBLE_DEVICES and the CPUs of its GPUs' NUMA node),
or one engine spanning hosts with vLLM's Ray backend (pipeline parallel): a Ray head on the
first host, which also runs the engine, and Ray workers on the others, which run no engine.

The gateway, monitoring and day-2 code ask `engine_instances(inv, host)`; the engine role gets
the same list through installer/ansible/render.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from installer.gpu import matrix, planner, tuner
from installer.inventory import Host, Inventory

UNIT = "private-llm-engine"
RAY_UNIT = "private-llm-ray"
# Not the tuner's 6379: the gateways' Redis (ports.redis) listens there by default.
RAY_PORT = 6390


@dataclass(frozen=True)
class EngineInstance:
    name: str  # "engine", "engine-1", ...
    unit: str  # systemd unit, without .service
    port: int
    devices: str = ""  # CUDA_VISIBLE_DEVICES; "" leaves every GPU visible (one engine per host)
    cpus: str = ""  # systemd CPUAffinity (a cpulist); "" leaves the engine unpinned
    args: list[str] = field(default_factory=list)  # the tuner's vLLM flags; [] keeps the inventory's
    env: dict[str, str] = field(default_factory=dict)

    def as_vars(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RayNode:
    role: str  # "head" or "worker"
    unit: str
    argv: list[str]  # after the venv's `ray` executable
    node_ip: str  # the host's address: Ray and vLLM's workers talk between hosts on it

    def as_vars(self) -> dict[str, Any]:
        return asdict(self)


def _key(inv: Inventory) -> tuple[Any, ...]:
    g = inv.gpu
    return (inv.engine.device, g.type, g.count, g.numa_nodes, str(inv.model.path), inv.engine.max_model_len,
            tuple((h.name, h.address) for h in inv.hosts), inv.ports.engine, inv.engine.quantization,
            # the port clash check in _tune reads these
            inv.ports.gateway, inv.ports.redis, inv.monitoring.prometheus_port)


# tune() runs the planner; render asks once per host, so keep its answer per inventory content.
_TUNED: dict[tuple[Any, ...], tuner.Tuned | None] = {}


def _tune(inv: Inventory) -> tuner.Tuned | None:
    g = inv.gpu
    if inv.engine.device != "gpu" or g.type is None or g.count is None:
        return None
    gpu = matrix.GPU_TYPES[g.type]
    hosts = [
        tuner.HostHardware.of_type(h.name, gpu, g.count, numa_nodes=g.numa_nodes)
        for h in inv.hosts if "serving" in h.groups
    ]
    t = tuner.tune(
        planner.load_config(inv.model.path), hosts,
        max_model_len=inv.engine.max_model_len, base_port=inv.ports.engine,
        quantization=inv.engine.quantization,
    )
    # Engines take consecutive ports from ports.engine: none may be another service's.
    taken = {inv.ports.gateway: "ports.gateway", inv.ports.redis: "ports.redis",
             inv.monitoring.prometheus_port: "monitoring.prometheus_port", RAY_PORT: "Ray"}
    clash = sorted({(e.port, taken[e.port]) for e in t.engines if e.port in taken})
    if clash:
        port, what = clash[0]
        raise tuner.TuneError(
            f"{len([e for e in t.engines if e.host == t.engines[0].host])} engines per host take ports "
            f"{inv.ports.engine}-{max(e.port for e in t.engines)}, which includes {what} {port}",
            ["move ports.engine (or that port) so the ranges do not overlap"],
        )
    return t


def tuned(inv: Inventory) -> tuner.Tuned | None:
    """The tuner's layout for this inventory's GPUs; None when it does not describe them.

    Raises tuner.TuneError (with what is missing) when the model does not fit them.
    """
    key = _key(inv)
    if key not in _TUNED:
        _TUNED[key] = _tune(inv)
    return _TUNED[key]


def engine_instances(inv: Inventory, host: Host) -> list[EngineInstance]:
    """The engines `host` runs, first one on unit private-llm-engine and ports.engine."""
    if "serving" not in host.groups:
        return []
    t = tuned(inv)
    if t is None:
        return [EngineInstance("engine", UNIT, inv.ports.engine)]
    mine = sorted((e for e in t.engines if e.host == host.name), key=lambda e: e.index)
    return [
        EngineInstance(
            name="engine" if e.index == 0 else f"engine-{e.index}",
            unit=UNIT if e.index == 0 else f"{UNIT}-{e.index}",
            port=e.port,
            # a Ray engine spans hosts: Ray hands out the GPUs, every one stays visible
            devices="" if t.ray else e.env.get("CUDA_VISIBLE_DEVICES", ""),
            cpus=e.cpus,
            args=list(e.args),
            env={k: v for k, v in e.env.items() if k != "CUDA_VISIBLE_DEVICES"}
            | ({"RAY_ADDRESS": f"{host.address}:{RAY_PORT}"} if t.ray else {}),
        )
        for e in mine
    ]


def ray_node(inv: Inventory, host: Host) -> RayNode | None:
    """The Ray service of `host` when the model spans hosts; None otherwise."""
    t = tuned(inv)
    if t is None or t.ray is None:
        return None
    head = next(h for h in inv.hosts if h.name == t.ray.head)
    per_host = inv.gpu.count
    if host.name == head.name:
        return RayNode("head", RAY_UNIT, [
            "start", "--head", f"--node-ip-address={head.address}", f"--port={RAY_PORT}",
            f"--num-gpus={per_host}", "--include-dashboard=false", "--disable-usage-stats", "--block",
        ], head.address)
    if host.name in t.ray.workers:
        return RayNode("worker", RAY_UNIT, [
            "start", f"--address={head.address}:{RAY_PORT}", f"--node-ip-address={host.address}",
            f"--num-gpus={per_host}", "--disable-usage-stats", "--block",
        ], host.address)
    return None
