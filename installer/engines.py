"""The engine instances of a host and the ONE function that writes a vLLM argv.

A CPU host, or a GPU deployment whose inventory does not describe its GPUs (gpu.type and
gpu.count), runs one engine: unit `private-llm-engine` on ports.engine, sized by the
inventory. With the GPUs described, installer/gpu/tuner.py lays the model out on them: several
engines per host when the model fits on fewer GPUs (units private-llm-engine,
private-llm-engine-1, ... on consecutive ports, each with its CUDA_VISIBLE_DEVICES and the CPUs
of its GPUs' NUMA node), or one engine spanning hosts with vLLM's Ray backend (pipeline
parallel): a Ray head on the first host, which also runs the engine, and Ray workers on the
others, which run no engine.

`vllm_argv` is the only writer of engine flags: the deployment plan (installer/plan.py) calls
it for every engine, `installer plan` prints what it returns, and the engine role templates it
into the unit as given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from installer.gpu import matrix, planner, tuner
from installer.inventory import Host, Inventory
from installer.topology import HOST_LAYOUT, cross_host

UNIT = "private-llm-engine"
RAY_UNIT = "private-llm-ray"
# Not the tuner's 6379: the gateways' Redis (ports.redis) listens there by default.
RAY_PORT = 6390
# OpenSSL cipher list for TLS 1.2 clients of an engine on the network (TLS 1.3 suites are all modern).
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class EngineInstance:
    name: str  # "engine", "engine-1", ...
    unit: str  # systemd unit, without .service
    port: int
    argv: tuple[str, ...]  # after `python -m vllm.entrypoints.openai.api_server` (vllm_argv)
    devices: str = ""  # CUDA_VISIBLE_DEVICES; "" leaves every GPU visible (one engine per host)
    cpus: str = ""  # systemd CPUAffinity (a cpulist); "" leaves the engine unpinned
    tuned_args: tuple[str, ...] = ()  # the tuner's sizing flags alone ([] untuned)
    env: tuple[tuple[str, str], ...] = field(default=())  # Environment= lines, sorted

    def as_vars(self) -> dict[str, Any]:
        # `args` is what the engine roles of revisions made before the argv moved to Python read
        # (a rollback configures with that revision's roles); today's role reads `argv` only.
        return {"name": self.name, "unit": self.unit, "port": self.port, "argv": list(self.argv),
                "devices": self.devices, "cpus": self.cpus, "args": list(self.tuned_args),
                "env": dict(self.env)}


@dataclass(frozen=True)
class RayNode:
    role: str  # "head" or "worker"
    unit: str
    argv: tuple[str, ...]  # after the venv's `ray` executable
    node_ip: str  # the host's address: Ray and vLLM's workers talk between hosts on it

    def as_vars(self) -> dict[str, Any]:
        return {"role": self.role, "unit": self.unit, "argv": list(self.argv), "node_ip": self.node_ip}


def tune_for(inv: Inventory, hosts: list[tuner.HostHardware]) -> tuner.Tuned:
    """The tuner's layout of this inventory's model on `hosts`, with the inventory's own sizing
    (max_model_len, quantization, and max_num_seqs and gpu_memory_utilization where the
    inventory sets them: otherwise the tuner derives them from the GPUs).

    `installer plan` calls this with the hosts it knows (cloud section or doctor facts), `up`
    through tuned() with the inventory's gpu section: one call, so both show the same flags.
    """
    set_here = inv.engine.model_fields_set
    return tuner.tune(
        planner.load_config(inv.model.path), hosts,
        max_model_len=inv.engine.max_model_len,
        # the inventory's max_num_seqs (its default when unset) is what the layout must hold
        concurrency=inv.engine.max_num_seqs,
        max_num_seqs=inv.engine.max_num_seqs if "max_num_seqs" in set_here else None,
        gpu_memory_utilization=(
            inv.engine.gpu_memory_utilization if "gpu_memory_utilization" in set_here else None
        ),
        base_port=inv.ports.engine,
        quantization=inv.engine.quantization,
    )


def declared_hardware(inv: Inventory) -> list[tuner.HostHardware] | None:
    """The serving hosts' GPUs as the inventory's gpu section declares them; None when it does not."""
    g = inv.gpu
    if inv.engine.device != "gpu" or g.type is None or g.count is None:
        return None
    gpu = matrix.GPU_TYPES[g.type]
    return [tuner.HostHardware.of_type(h.name, gpu, g.count, numa_nodes=g.numa_nodes)
            for h in inv.hosts if "serving" in h.groups]


def tuned(inv: Inventory) -> tuner.Tuned | None:
    """The tuner's layout for this inventory's GPUs; None when it does not describe them.

    Raises tuner.TuneError (with what is missing) when the model does not fit them, or when the
    engines' ports run into another service's.
    """
    hosts = declared_hardware(inv)
    if hosts is None:
        return None
    t = tune_for(inv, hosts)
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


def _inventory_sizing(inv: Inventory) -> list[str]:
    """An untuned engine's sizing, from the inventory alone (its defaults are the model's)."""
    e = inv.engine
    args = ["--max-model-len", str(e.max_model_len), "--max-num-seqs", str(e.max_num_seqs)]
    if e.device == "gpu":
        args += ["--gpu-memory-utilization", str(e.gpu_memory_utilization),
                 "--tensor-parallel-size", str(e.tensor_parallel_size)]
        if e.quantization:
            args += ["--quantization", e.quantization]
    return args


def vllm_argv(inv: Inventory, host: Host, port: int, tuned_args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every flag one engine gets: the model, its name and address, its port, the tuner's flags
    (or the inventory's sizing when untuned), eager mode on CPUs, TLS on the network, and the
    inventory's extra_args last, so they can override anything before them."""
    layout = HOST_LAYOUT
    on_network = cross_host(inv)
    tls = on_network and inv.tls.mode != "off"
    argv = [
        "--model", f"{layout['pli_state_dir']}/models/{inv.model.dir_name}",
        "--served-model-name", inv.model.served_name,
        "--host", host.address if on_network else "127.0.0.1",
        "--port", str(port),
        *(tuned_args or _inventory_sizing(inv)),
    ]
    if inv.engine.device == "cpu":
        argv.append("--enforce-eager")  # CPU engines would compile at start-up; hosts have no compiler
    if tls:
        tls_dir = layout["pli_tls_dir"]
        # An engine on the network accepts only clients with a deployment certificate
        # (--ssl-cert-reqs 2): its port has no API keys.
        argv += ["--ssl-certfile", f"{tls_dir}/server.pem", "--ssl-keyfile", f"{tls_dir}/server.key",
                 "--ssl-ca-certs", f"{tls_dir}/ca.pem", "--ssl-cert-reqs", "2",
                 "--ssl-ciphers", TLS_CIPHERS, "--enable-ssl-refresh"]
    return argv + list(inv.engine.extra_args)


def instances(inv: Inventory, tuned: tuner.Tuned | None, host: Host) -> list[EngineInstance]:
    """The engines `host` runs, first one on unit private-llm-engine and ports.engine."""
    if "serving" not in host.groups:
        return []
    if tuned is None:
        return [EngineInstance("engine", UNIT, inv.ports.engine, tuple(vllm_argv(inv, host, inv.ports.engine)))]
    mine = sorted((e for e in tuned.engines if e.host == host.name), key=lambda e: e.index)
    return [
        EngineInstance(
            name="engine" if e.index == 0 else f"engine-{e.index}",
            unit=UNIT if e.index == 0 else f"{UNIT}-{e.index}",
            port=e.port,
            argv=tuple(vllm_argv(inv, host, e.port, e.args)),
            # a Ray engine spans hosts: Ray hands out the GPUs, every one stays visible
            devices="" if tuned.ray else e.env.get("CUDA_VISIBLE_DEVICES", ""),
            cpus=e.cpus,
            tuned_args=tuple(e.args),
            env=tuple(sorted(
                {k: v for k, v in e.env.items() if k != "CUDA_VISIBLE_DEVICES"}.items()
                | ({("RAY_ADDRESS", f"{host.address}:{RAY_PORT}")} if tuned.ray else set())
            )),
        )
        for e in mine
    ]


def ray_node(inv: Inventory, tuned: tuner.Tuned | None, host: Host) -> RayNode | None:
    """The Ray service of `host` when the model spans hosts; None otherwise."""
    if tuned is None or tuned.ray is None:
        return None
    head = next(h for h in inv.hosts if h.name == tuned.ray.head)
    per_host = inv.gpu.count
    if host.name == head.name:
        return RayNode("head", RAY_UNIT, (
            "start", "--head", f"--node-ip-address={head.address}", f"--port={RAY_PORT}",
            f"--num-gpus={per_host}", "--include-dashboard=false", "--disable-usage-stats", "--block",
        ), head.address)
    if host.name in tuned.ray.workers:
        return RayNode("worker", RAY_UNIT, (
            "start", f"--address={head.address}:{RAY_PORT}", f"--node-ip-address={host.address}",
            f"--num-gpus={per_host}", "--disable-usage-stats", "--block",
        ), host.address)
    return None
