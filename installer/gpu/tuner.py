"""vLLM settings derived from the hardware a host really has (doctor facts) and the model.

The planner says how one engine is laid out (TP, PP, quantization, KV dtype); the tuner
places engines on each host's GPUs and writes their flags:

- one engine per group of TP GPUs; with the host's `nvidia-smi topo -m` matrix (doctor facts)
  the groups are the partition whose worst link inside a group is best (NVLink, then one PCIe
  switch, ..., SYS last: a TP group crosses the CPU sockets only when no other split exists),
  then the fewest groups spanning NUMA nodes; without it, GPUs in NUMA-node then PCI-bus order.
  CUDA_VISIBLE_DEVICES per engine
- each engine pinned to the CPUs of its GPUs' NUMA node, shared evenly when several engines
  sit on one node (tokenization, scheduling and the host side of CUDA launches run there)
- models larger than a host: pipeline parallel across hosts with vLLM's Ray backend, a Ray
  head on the first host and workers on the others
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from installer.base.errors import InstallerError
from installer.gpu import doctor, ray_ports
from installer.gpu.matrix import GPUType, gpu_type
from installer.gpu.planner import ModelSpec, Recommendation, recommend

# Memory left outside vLLM's budget on each GPU: CUDA graph pools (captured after the KV
# cache is sized), allocations of the sampler and NCCL made after profiling, and allocator
# fragmentation. An absolute amount, not a share: 10% of a 141 GB H200 is 14 GiB of KV cache
# that vLLM's default 0.9 leaves idle, while on a 24 GB card 10% is barely enough.
RESERVE_GIB = 8.0
MIN_UTILIZATION, MAX_UTILIZATION = 0.80, 0.94
# vLLM's default max_num_seqs on GPUs under 70 GB (1024 above, where vLLM 0.26 captures CUDA
# graphs up to 512); a ceiling for the derived value.
MAX_DERIVED_SEQS = 256

# The measurements behind the Hopper choices below: docs/gpu.md, "What the tuner's Hopper
# defaults rest on".
CAPTURE_WHY = (
    "decode batches never exceed max_num_seqs; capturing to it instead of vLLM's 2x cut the "
    "capture from 16 s to 12 s and 1.2 to 0.8 GiB on an H200, throughput unchanged"
)
FP8_WHY = (
    "fp8 weights asked for: on an H200 at concurrency 64 they gave 1.30-1.33x output tok/s side by "
    "side with the defaults (decode reads half the expert bytes; with 16384 batched tokens, TTFT "
    "p99 no worse) but change the model's numerics (per-tensor scales); never a default"
)
FP8_BATCH = 16384
FP8_BATCH_WHY = (
    "fp8 weights on Hopper: a burst of prompts prefills in half the steps; with vLLM's 8192 the fp8 "
    "engine's TTFT p99 was 6-30% worse than the bf16 defaults', with 16384 it was no worse (H200)"
)
# The advice for bf16 checkpoints on Hopper: the one measured way past 1.10x, left to the operator
# because it changes the model's outputs.
FP8_HINT = (
    "engine.quantization: fp8 would serve {model} about 1.3x faster at 64 concurrent requests "
    "(measured on an H200, TTFT p99 no worse) but changes the model's numerics: set it in the "
    "inventory if the outputs are acceptable"
)


class TuneError(InstallerError):
    """The hosts' GPUs cannot serve the model as asked."""


@dataclass(frozen=True)
class HostGPU:
    index: int
    name: str
    memory_mib: int
    compute_cap: str
    numa_node: int
    bus_id: str


@dataclass(frozen=True)
class HostHardware:
    name: str
    gpus: tuple[HostGPU, ...]
    numa_cpus: dict[int, tuple[int, ...]]
    # (gpu index, gpu index) -> `nvidia-smi topo -m` link ("NV18", "PIX", ..., "SYS"); empty
    # when unknown (a host planned from its GPU type, or facts from before topology detection)
    links: dict[tuple[int, int], str] = field(default_factory=dict)

    def link(self, a: int, b: int) -> str:
        return self.links.get((a, b)) or self.links.get((b, a)) or ""

    @classmethod
    def from_facts(cls, facts: dict[str, Any], name: str = "") -> HostHardware:
        """From `doctor facts` (or the facts inside `doctor check`) of a host with a driver."""
        gpus = tuple(
            HostGPU(
                int(g["index"]),
                str(g["name"]),
                int(g["memory.total"]),
                str(g.get("compute_cap") or ""),
                int(g.get("numa_node", -1)),
                str(g["pci.bus_id"]),
            )
            for g in facts.get("gpus", [])
        )
        numa = {
            int(k): tuple(doctor.parse_cpulist(v)) for k, v in facts.get("numa_nodes", {}).items()
        }
        links = {}
        for key, kind in ((facts.get("topology") or {}).get("links") or {}).items():
            a, b = (int(x) for x in key.split(","))
            links[(a, b)] = str(kind)
        return cls(name or facts.get("host", "host"), gpus, numa, links)

    @classmethod
    def of_type(
        cls, name: str, gpu: GPUType, count: int, cpus: int = 0, numa_nodes: int = 1
    ) -> HostHardware:
        """A host described by GPU type and count (for planning before the hosts exist)."""
        per_node = max(1, count // numa_nodes)
        gpus = tuple(
            HostGPU(
                i,
                gpu.name,
                gpu.memory_mib,
                gpu.compute_cap,
                min(i // per_node, numa_nodes - 1),
                f"{i:08x}",
            )
            for i in range(count)
        )
        cpus = cpus or 16 * count
        step = cpus // numa_nodes
        numa = {n: tuple(range(n * step, (n + 1) * step)) for n in range(numa_nodes)}
        return cls(name, gpus, numa)

    def gpu_type(self) -> GPUType:
        names = {g.name for g in self.gpus}
        if len(names) != 1:
            raise TuneError(
                f"{self.name}: "
                + ("no GPUs" if not names else "mixed GPUs " + ", ".join(sorted(names)))
                + "; an engine needs identical GPUs"
            )
        g = self.gpus[0]
        try:
            return gpu_type(g.name)
        except InstallerError:  # a GPU missing from the catalogue: take what the host reports
            return GPUType(
                g.name.lower().replace(" ", "-"),
                g.name,
                g.memory_mib,
                g.compute_cap or "8.0",
                False,
            )


@dataclass
class EngineSpec:
    host: str
    index: int
    port: int
    gpus: list[int]
    cpus: str
    numa_nodes: list[int]
    args: list[str]
    env: dict[str, str]

    def summary(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "index": self.index,
            "port": self.port,
            "gpus": self.gpus,
            "cpus": self.cpus,
            "numa_nodes": self.numa_nodes,
            "args": self.args,
            "env": self.env,
        }


@dataclass
class RaySpec:
    """Which hosts form the Ray cluster. The tuner knows host names, not addresses: the units'
    `ray start` argv (head address and port, which Ray needs as ip:port) is written by
    installer/planning/engines.py ray_node, from the inventory's addresses."""

    head: str
    workers: list[str]
    port: int


@dataclass
class Tuned:
    recommendation: Recommendation
    settings: dict[str, Any]
    why: dict[str, str]
    engines: list[EngineSpec] = field(default_factory=list)
    ray: RaySpec | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "why": self.why,
            "notes": self.notes,
            "engines": [e.summary() for e in self.engines],
            "ray": None if self.ray is None else self.ray.__dict__,
            "plan": self.recommendation.summary(),
        }


def utilization_for(memory_mib: int) -> float:
    """gpu_memory_utilization leaving RESERVE_GIB outside vLLM, within [0.80, 0.94]."""
    u = 1 - RESERVE_GIB / (memory_mib / 1024)
    return round(min(MAX_UTILIZATION, max(MIN_UTILIZATION, u)), 2)


def derive_max_num_seqs(kv_tokens: int, max_model_len: int) -> int:
    """As many sequences as the KV cache holds when each is half its maximum length (the
    scheduler preempts beyond that), a power of two between 16 and 256."""
    n = kv_tokens // max(1, max_model_len // 2)
    p = 16
    while p * 2 <= min(n, MAX_DERIVED_SEQS):
        p *= 2
    return p


def _cpulist(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else f"{c}")
            start = None
    return ",".join(out)


# Exhaustive search over GPU partitions up to this many candidates (8 GPUs in pairs: 105;
# in fours: 35); larger hosts are grouped greedily, each group grown by its best-linked GPU.
MAX_PARTITIONS = 20000


def _group_cost(host: HostHardware, group: tuple[HostGPU, ...]) -> tuple[int, int, int]:
    """(worst link rank, NUMA nodes spanned - 1, sum of link ranks) of one TP group; lower is better."""
    ranks = [doctor.link_rank(host.link(a.index, b.index)) for a, b in itertools.combinations(group, 2)]
    nodes = {g.numa_node for g in group}
    return (max(ranks, default=-99), len(nodes) - 1, sum(ranks))


def _partition_cost(host: HostHardware, groups: list[tuple[HostGPU, ...]]) -> tuple[int, int, int]:
    costs = [_group_cost(host, g) for g in groups]
    return (max(c[0] for c in costs), sum(c[1] for c in costs), sum(c[2] for c in costs))


def _partitions(
    gpus: tuple[HostGPU, ...], tp: int, engines: int
) -> Any:  # Iterator[list[tuple[HostGPU, ...]]]
    """Every way to pick `engines` disjoint groups of `tp` GPUs, each group in GPU order."""
    if engines == 0:
        yield []
        return
    if len(gpus) < tp * engines:
        return
    first, rest = gpus[0], gpus[1:]
    for others in itertools.combinations(rest, tp - 1):
        left = tuple(g for g in rest if g not in others)
        for tail in _partitions(left, tp, engines - 1):
            yield [(first, *others), *tail]
    if len(rest) >= tp * engines:  # leave `first` idle (more GPUs than engines need)
        yield from _partitions(rest, tp, engines)


def _count_partitions(n: int, tp: int, engines: int) -> int:
    """An upper bound of what _partitions yields (ordered choices of the groups)."""
    return math.prod(math.comb(n - i * tp, tp) for i in range(engines))


def group_gpus(host: HostHardware, tp: int, engines: int) -> list[tuple[HostGPU, ...]]:
    """The GPUs of each engine: the best partition by _partition_cost when the link matrix is
    known (ties: NUMA-node then PCI-bus order), else consecutive GPUs in that order."""
    order = tuple(sorted(host.gpus, key=lambda g: (g.numa_node, g.bus_id)))
    if tp == 1 or not host.links:
        return [order[i * tp : (i + 1) * tp] for i in range(engines)]
    if _count_partitions(len(order), tp, engines) <= MAX_PARTITIONS:
        return min(_partitions(order, tp, engines), key=lambda p: _partition_cost(host, p))
    groups: list[tuple[HostGPU, ...]] = []
    free = list(order)
    for _ in range(engines):
        group = [free.pop(0)]
        while len(group) < tp:
            best = min(free, key=lambda g: _group_cost(host, (*group, g)))
            free.remove(best)
            group.append(best)
        groups.append(tuple(group))
    return groups


def _place(
    host: HostHardware, tp: int, engines: int
) -> list[tuple[list[int], list[int], list[int]]]:
    """[(gpu indices, cpus, numa nodes)] for each engine on the host."""
    groups = group_gpus(host, tp, engines)
    all_cpus = sorted(c for cpus in host.numa_cpus.values() for c in cpus)
    # engines per NUMA node (an engine spanning nodes counts for its first GPU's node)
    node_of = [g[0].numa_node for g in groups]
    placed = []
    for i, group in enumerate(groups):
        node = node_of[i]
        sharing = [j for j, n in enumerate(node_of) if n == node]
        pool = (
            list(host.numa_cpus.get(node, ())) if node >= 0 and node in host.numa_cpus else all_cpus
        )
        if node < 0 or node not in host.numa_cpus:
            sharing = list(range(len(groups)))
        k = sharing.index(i)
        share = len(pool) // max(1, len(sharing))
        cpus = pool[k * share : (k + 1) * share] if share else pool
        placed.append(
            (
                [g.index for g in group],
                cpus,
                sorted({g.numa_node for g in group if g.numa_node >= 0}),
            )
        )
    return placed


def _identical(hosts: list[HostHardware]) -> tuple[GPUType, int]:
    """The GPU type and count every host has (the first is measured; the others must match)."""
    if not hosts:
        raise TuneError("no hosts to tune for")
    gpu, per_host = hosts[0].gpu_type(), len(hosts[0].gpus)
    for h in hosts[1:]:
        if h.gpu_type().name != gpu.name or len(h.gpus) != per_host:
            # a model spanning hosts runs one pipeline stage of TP GPUs on each (Ray's --num-gpus
            # is one figure for all), and replicas must be alike for the gateways to balance them
            raise TuneError(
                f"{h.name} has {len(h.gpus)} x {h.gpus[0].name if h.gpus else 'no GPU'}, {hosts[0].name} "
                f"{per_host} x {gpu.name}; the serving hosts of one deployment must have the same GPUs, "
                "as many on each",
                ["give every serving host the same GPUs, or serve the odd host from a deployment of its own"],
            )
    return gpu, per_host


def _utilization(gpu: GPUType, given: float | None, why: dict[str, str]) -> float:
    why["gpu_memory_utilization"] = (
        "set in the inventory"
        if given
        else f"leaves {RESERVE_GIB:.0f} GiB of each {gpu.memory_mib / 1024:.0f} GiB GPU outside "
        "vLLM (CUDA graphs, post-profile allocations); a fixed share idles more on large GPUs"
    )
    return given or utilization_for(gpu.memory_mib)


def _context(spec: ModelSpec, max_model_len: int, notes: list[str]) -> int:
    """max_model_len, lowered to the model's positions."""
    if max_model_len > spec.max_position_embeddings:
        notes.append(
            f"max_model_len lowered from {max_model_len} to the model's "
            f"{spec.max_position_embeddings} positions"
        )
        return spec.max_position_embeddings
    return max_model_len


def _fitting(spec: ModelSpec, gpu: GPUType, per_host: int, hosts: int, length: int, seqs: int, util: float,
             quantization: str | None, pp: int | None = None) -> Recommendation:
    """The planner's layout for these GPUs; TuneError when the model does not fit them."""
    if pp is not None and (pp > hosts or pp > spec.num_layers):
        short = f"{hosts} serving host(s)" if pp > hosts else f"{spec.num_layers} layer(s) in {spec.name}"
        raise TuneError(f"gpu.pipeline_parallel_size {pp} needs a pipeline stage on each of {pp} hosts; "
                        f"there are only {short}",
                        ["lower gpu.pipeline_parallel_size, or leave it out for the tuner to choose"])
    try:
        rec = recommend(spec, gpu, gpus_per_host=per_host, hosts=hosts, max_model_len=length, max_num_seqs=seqs,
                        pipeline_parallel_size=pp,
                        gpu_memory_utilization=util, weights=quantization or "native")
    except InstallerError as exc:  # fp8 asked for where it cannot be had
        raise TuneError(str(exc), ["leave quantization unset: the weights stay as the checkpoint has them"]) from None
    if rec.fit is None:
        raise TuneError(f"{spec.name} does not fit on {hosts} host(s) of {per_host} x {gpu.key}; needs {rec.missing}",
                        rec.reasons)
    return rec


def _layout_reasons(spec: ModelSpec, rec: Recommendation, quantization: str | None, per_host: int, length: int,
                    plan_seqs: int, why: dict[str, str]) -> None:
    assert rec.fit is not None
    fit, lay = rec.fit, rec.fit.layout
    why["tensor_parallel_size"] = (
        f"fewest GPUs per engine that hold the weights ({fit.weights_gib:.1f} GiB per GPU) "
        f"and {plan_seqs} sequences of {length} tokens"
    )
    if lay.pp > 1:
        why["pipeline_parallel_size"] = (
            f"one host's {per_host} GPUs are not enough: one pipeline "
            f"stage per host over Ray (TP inside a host, where NVLink is)"
        )
    why["kv_cache_dtype"] = (
        "fp8: bf16 KV did not hold the wanted concurrency"
        if lay.kv_dtype == "fp8"
        else "the model's dtype: fp8 KV measured +2% throughput and a worse TTFT p99 "
        "on the H200, so only when memory needs it"
    )
    why["quantization"] = (
        FP8_WHY
        if quantization == "fp8"
        else "fp8 online: the bf16 weights did not leave room for the KV cache"
        if lay.weights == "fp8"
        else f"from the checkpoint ({spec.quant})"
        if spec.quant
        else "none: native weights fit"
    )
    why["enable_prefix_caching"] = (
        "chat requests share system prompts and history; reusing their KV "
        "blocks skips prefill at a negligible hashing cost"
    )


def _engine_args(spec: ModelSpec, gpu: GPUType, rec: Recommendation, util: float, length: int, seqs: int,
                 settings: dict[str, Any], why: dict[str, str], notes: list[str]) -> list[str]:
    """The sizing flags every engine of the layout gets (and the Hopper choices, with why)."""
    assert rec.fit is not None
    lay = rec.fit.layout
    args = ["--tensor-parallel-size", str(lay.tp), "--gpu-memory-utilization", f"{util:.2f}",
            "--max-model-len", str(length), "--max-num-seqs", str(seqs), "--enable-prefix-caching"]
    if lay.weights == "fp8":
        args += ["--quantization", "fp8"]
    if lay.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if gpu.generation == "hopper":
        args += ["--max-cudagraph-capture-size", str(seqs)]
        settings["max_cudagraph_capture_size"] = seqs
        why["max_cudagraph_capture_size"] = CAPTURE_WHY
        if lay.weights == "fp8":
            args += ["--max-num-batched-tokens", str(FP8_BATCH)]
            settings["max_num_batched_tokens"] = FP8_BATCH
            why["max_num_batched_tokens"] = FP8_BATCH_WHY
        elif not spec.quant:
            notes.append(FP8_HINT.format(model=spec.name))
    return args


def _pipeline(hosts: list[HostHardware], pp: int, per_host: int, args: list[str], base_port: int,
              notes: list[str]) -> tuple[EngineSpec, RaySpec]:
    """One engine over `pp` hosts: a Ray head on the first, workers on the others."""
    groups = len(hosts) // pp
    if len(hosts) % pp:
        notes.append(f"{len(hosts) % pp} host(s) left out: {len(hosts)} hosts do not divide into pipelines of {pp}")
    head = hosts[0]
    ray = RaySpec(head=head.name, workers=[h.name for h in hosts[1:pp]], port=ray_ports.GCS_PORT)
    if groups > 1:
        notes.append(f"{groups} pipelines fit; this plan runs the first (one Ray cluster)")
    cpus = sorted(c for cs in head.numa_cpus.values() for c in cs)
    engine = EngineSpec(head.name, 0, base_port, [g.index for g in head.gpus], _cpulist(cpus), sorted(head.numa_cpus),
                        [*args, "--pipeline-parallel-size", str(pp), "--distributed-executor-backend", "ray"],
                        {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return engine, ray


def _placed(hosts: list[HostHardware], tp: int, per_host: int, args: list[str], base_port: int,
            notes: list[str]) -> list[EngineSpec]:
    """`per_host` engines of `tp` GPUs on each host, on their GPUs' NUMA CPUs."""
    engines = []
    for h in hosts:
        for i, (gpus, cpus, nodes) in enumerate(_place(h, tp, per_host)):
            if len(nodes) > 1:
                notes.append(f"{h.name} engine {i} spans NUMA nodes {nodes}")
            worst = max((h.link(a, b) for a, b in itertools.combinations(gpus, 2)), key=doctor.link_rank, default="")
            if worst and doctor.link_rank(worst) > 0:
                notes.append(
                    f"{h.name} engine {i}: GPUs {gpus} reach each other only over {worst} (no NVLink); "
                    "every layer's tensor-parallel all-reduce crosses PCIe"
                    + (" and the CPU sockets" if worst in ("SYS", "SOC") else "")
                )
            # nvidia-smi numbers GPUs in PCI order, CUDA by default fastest first: make CUDA count
            # like nvidia-smi so the indices name the GPUs we placed.
            env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)}
            engines.append(EngineSpec(h.name, i, base_port + i, gpus, _cpulist(cpus), nodes, list(args), env))
    return engines


def tune(
    spec: ModelSpec,
    hosts: list[HostHardware],
    *,
    max_model_len: int,
    concurrency: int,
    max_num_seqs: int | None = None,
    gpu_memory_utilization: float | None = None,
    base_port: int = 8000,
    quantization: str | None = None,
    pipeline_parallel_size: int | None = None,
) -> Tuned:
    """Engines and vLLM flags for `spec` on `hosts` (identical hosts; the first is measured).

    quantization="fp8" opts into online fp8 weights for speed (FP8_WHY); by default weights stay
    as the checkpoint has them unless they do not fit otherwise. The layout must hold
    max_num_seqs sequences, or `concurrency` (the inventory's default max_num_seqs) when
    max_num_seqs is left to be derived from the KV cache.

    The steps, each a function above: identical hosts, the memory share, the context, the
    planner's fit, the sequences it holds, the reasons, the flags, then the engines' placement
    (one pipeline over Ray, or engines on each host's GPU groups).
    """
    if quantization not in (None, "fp8"):
        raise TuneError(f"quantization {quantization!r} is not one the tuner sets (fp8, or none)")
    gpu, per_host = _identical(hosts)
    why: dict[str, str] = {}
    notes: list[str] = []
    util = _utilization(gpu, gpu_memory_utilization, why)
    length = _context(spec, max_model_len, notes)
    plan_seqs = max_num_seqs or concurrency
    rec = _fitting(spec, gpu, per_host, len(hosts), length, plan_seqs, util, quantization, pipeline_parallel_size)
    assert rec.fit is not None
    fit, lay = rec.fit, rec.fit.layout
    seqs = max_num_seqs or derive_max_num_seqs(fit.kv_tokens, length)
    why["max_num_seqs"] = (
        "set in the inventory"
        if max_num_seqs
        else f"{fit.kv_tokens:,} KV tokens hold {seqs} sequences at half of max_model_len {length}"
    )
    _layout_reasons(spec, rec, quantization, per_host, length, plan_seqs, why)
    if pipeline_parallel_size:
        why["pipeline_parallel_size"] = (
            f"set in the inventory (gpu.pipeline_parallel_size): one pipeline stage on each of "
            f"{pipeline_parallel_size} hosts over Ray, whether or not fewer hosts hold the model"
        )
    settings: dict[str, Any] = {
        "tensor_parallel_size": lay.tp,
        "pipeline_parallel_size": lay.pp,
        "engines_per_host": rec.engines_per_host,
        "gpu_memory_utilization": util,
        "max_model_len": length,
        "max_num_seqs": seqs,
        "kv_cache_dtype": lay.kv_dtype,
        "quantization": "fp8" if lay.weights == "fp8" else (spec.quant or None),
        "enable_prefix_caching": True,
        "kv_tokens_per_engine": fit.kv_tokens,
        "kv_gib_per_gpu": round(fit.kv_gib, 1),
        "gpu": gpu.key,
    }
    args = _engine_args(spec, gpu, rec, util, length, seqs, settings, why, notes)
    ray = None
    if lay.pp > 1:
        engine, ray = _pipeline(hosts, lay.pp, per_host, args, base_port, notes)
        engines = [engine]
    else:
        engines = _placed(hosts, lay.tp, rec.engines_per_host, args, base_port, notes)
    if rec.idle_gpus_per_host:
        notes.append(f"{rec.idle_gpus_per_host} GPU(s) per host idle")
    notes += [r for r in rec.reasons if r.startswith("only ")]
    return Tuned(rec, settings, why, engines, ray, notes)
