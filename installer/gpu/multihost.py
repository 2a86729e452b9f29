"""How a tuned model lies across hosts: which ranks on which host, over which links, and why.

The tuner (installer/gpu/tuner.py) decides TP and PP from memory (installer/gpu/planner.py);
this module explains the result for `installer plan`, in vLLM's own terms:

- vLLM numbers a pipeline's ranks `pp_rank * tp + tp_rank`; its Ray executor puts the driver's
  node first, so pipeline stage 0 (the embedding and the first layers) is on the Ray head, the
  host that runs the engine, and each later stage on a worker host.
- Tensor parallel stays inside a host: every layer all-reduces across its TP group (twice per
  layer), which NVLink carries; vLLM's distributed-serving guide sets TP to the GPUs of a node
  and PP to the number of nodes. Between stages only the activations at the stage boundary
  move, once per step, over the hosts' network.
- Layers are split as vLLM splits them (vllm/distributed/utils.py get_pp_indices): evenly,
  the remainder going to the stages before the last, counted from the second-to-last back.

A model that fits one host runs as independent engines on each (replicas behind the gateways):
no model traffic crosses hosts at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from installer.gpu import doctor, ray_ports
from installer.gpu.matrix import GPUType
from installer.gpu.planner import Layout, ModelSpec, evaluate
from installer.gpu.tuner import HostHardware, Tuned

# vLLM's distributed-serving guide ("Distributed inference and serving"): the layouts it names
# for a model larger than a node, and why the tuner does not take the others.
TP_ACROSS_HOSTS_WHY = (
    "TP {gpus} over both hosts: not chosen; every layer's two all-reduces would cross the hosts' "
    "network instead of NVLink, where vLLM's guide keeps TP to one node's GPUs"
)
DP_EP_WHY = (
    "DP {gpus} + expert parallel (vLLM's --data-parallel-size with --enable-expert-parallel): not "
    "chosen; every MoE layer's all-to-all would cross the hosts' network, which pays off with "
    "RDMA and DeepEP kernels, and the units deploy Ray pipeline parallel"
)


def layer_split(layers: int, pp: int) -> list[tuple[int, int]]:
    """[(first, last + 1)] decoder layers of each stage, as vLLM's get_pp_indices splits them."""
    sizes = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        sizes[-i] += 1
    out, lo = [], 0
    for n in sizes:
        out.append((lo, lo + n))
        lo += n
    return out


@dataclass(frozen=True)
class Placement:
    """One host's part: a pipeline stage of one engine, or its own engines (replicas)."""

    host: str
    address: str
    role: str  # "Ray head + engine", "Ray worker", "engine(s)"
    ranks: tuple[int, ...]  # global ranks of the engine it serves (each replica counts its own)
    gpus: tuple[int, ...]
    stage: int | None  # pipeline stage; None for replicas
    layers: tuple[int, int] | None  # decoder layers [first, last + 1) of its stage
    link: str  # what its TP group's GPUs talk over

    def line(self) -> str:
        where = f"{self.host} ({self.address})" if self.address else self.host
        part = (f"stage {self.stage}: ranks {self.ranks[0]}-{self.ranks[-1]}, layers {self.layers[0]}-"
                f"{self.layers[1] - 1}" if self.stage is not None and self.layers else
                f"ranks {self.ranks[0]}-{self.ranks[-1]} of each engine" if len(self.ranks) > 1 else
                "one GPU per engine")
        link = f", TP over {self.link}" if self.link else ""
        return f"{where}, {self.role}: {part} on GPUs {','.join(map(str, self.gpus))}{link}"


@dataclass(frozen=True)
class HostsLayout:
    tp: int
    pp: int
    kind: str  # "pipeline across hosts" or "replicas" (one host holds the model)
    placements: tuple[Placement, ...]
    between: str  # what crosses the hosts' network
    why: tuple[str, ...]
    not_chosen: tuple[str, ...] = field(default=())

    def lines(self) -> list[str]:
        out = [f"layout: TP {self.tp} x PP {self.pp}, {self.kind}"]
        out += [f"  {p.line()}" for p in self.placements]
        out.append(f"  between hosts: {self.between}")
        out += [f"  why: {w}" for w in self.why]
        out += [f"  not chosen: {w}" for w in self.not_chosen]
        return out


def tp_link(host: HostHardware, gpus: tuple[int, ...], gpu: GPUType) -> str:
    """The worst link inside a TP group: probed (`nvidia-smi topo -m` in doctor facts), else
    what the GPU type has (SXM parts: NVLink)."""
    if len(gpus) < 2:
        return ""  # one GPU: no TP traffic
    probed = [host.link(a, b) for a, b in itertools.combinations(gpus, 2)]
    if all(probed):
        worst = max(probed, key=doctor.link_rank)
        kind = "NVLink" if worst.startswith("NV") else "PCIe/CPU"
        return f"{kind} ({worst}, probed)"
    if gpu.nvlink:
        bw = f", {gpu.nvlink_gbps:.0f} GB/s per GPU" if gpu.nvlink_gbps else ""
        return f"NVLink ({gpu.name}{bw}; declared, not probed)"
    return f"PCIe ({gpu.name} has no NVLink)"


def _memory_why(spec: ModelSpec, tuned: Tuned, gpu: GPUType, per_host: int) -> list[str]:
    fit = tuned.recommendation.fit
    assert fit is not None
    lay = fit.layout
    out = [
        f"memory (installer/gpu/planner.py): {fit.weights_gib:.1f} GiB of weights per GPU at TP {lay.tp} x PP "
        f"{lay.pp}, {fit.kv_gib:.1f} GiB of KV cache = {fit.kv_tokens:,} tokens, of {fit.budget_gib:.1f} GiB "
        f"vLLM may use on each {gpu.name}"
        + (" (fp8 weights)" if lay.weights == "fp8" else "")
    ]
    if lay.pp > 1 and tuned.why.get("pipeline_parallel_size", "").startswith("set in the inventory"):
        out.append(f"PP {lay.pp}: {tuned.why['pipeline_parallel_size']}")
    elif lay.pp > 1:
        one = evaluate(spec, gpu, Layout(tp=lay.tp, pp=1, weights=lay.weights, kv_dtype=lay.kv_dtype),
                       max_model_len=fit.max_model_len, max_num_seqs=fit.max_num_seqs,
                       gpu_memory_utilization=fit.gpu_memory_utilization)
        room = (f"leaving {one.kv_tokens:,} KV tokens where one {fit.max_model_len:,}-token sequence needs more"
                if one.kv_gib > 0 else "leaving no room for the KV cache")
        out.append(
            f"one host is not enough: TP {lay.tp} on its {per_host} GPUs would put {one.weights_gib:.1f} GiB of "
            f"weights on each of {one.budget_gib:.1f} GiB, {room}"
        )
    if lay.weights == "fp8" and not spec.quant:
        out.append(f"fp8 weights: {tuned.why.get('quantization', '')}")
    return out


def describe(spec: ModelSpec, tuned: Tuned, hosts: list[HostHardware],
             addresses: Mapping[str, str] | None = None) -> HostsLayout | None:
    """The layout of a tuned model over several hosts; None for one host."""
    if len(hosts) < 2:
        return None
    addresses = addresses or {}
    gpu = hosts[0].gpu_type()
    per_host = len(hosts[0].gpus)
    fit = tuned.recommendation.fit
    assert fit is not None
    tp, pp = fit.layout.tp, fit.layout.pp
    by_name = {h.name: h for h in hosts}
    why = _memory_why(spec, tuned, gpu, per_host)
    if tuned.ray is None:
        placements = []
        for h in hosts:
            mine = [e for e in tuned.engines if e.host == h.name]
            gpus = tuple(g for e in mine for g in e.gpus)
            placements.append(Placement(h.name, addresses.get(h.name, ""), f"{len(mine)} engine(s)",
                                        tuple(range(tp)), gpus, None, None,
                                        tp_link(h, tuple(mine[0].gpus), gpu) if mine else ""))
        why.append(f"the model fits one host: each host serves it on its own ({len(hosts)} replicas "
                   "behind the gateways), so a host lost takes only its share of the capacity")
        return HostsLayout(tp, pp, "replicas", tuple(placements),
                           "client requests only (the gateways balance over every engine); no model traffic",
                           tuple(why))
    members = [tuned.ray.head, *tuned.ray.workers]
    stages = layer_split(spec.num_layers, pp)
    placements = []
    for s, name in enumerate(members):
        h = by_name[name]
        gpus = tuple(g.index for g in sorted(h.gpus, key=lambda g: (g.numa_node, g.bus_id)))[:tp]
        role = "Ray head + engine" if s == 0 else "Ray worker"
        placements.append(Placement(name, addresses.get(name, ""), role, tuple(range(s * tp, (s + 1) * tp)),
                                    gpus, s, stages[s], tp_link(h, gpus, gpu)))
    head_at = addresses.get(tuned.ray.head, tuned.ray.head)
    between = (
        f"pipeline send/recv of each step's activations at the stage boundary (rank r of stage s to rank r of "
        f"stage s+1, NCCL over the hosts' network), and Ray's control traffic to the head's GCS at "
        f"{head_at}:{ray_ports.GCS_PORT} (Ray ports {ray_ports.firewall_text()} open between the hosts)"
    )
    why.append(f"TP {tp} within each host: vLLM's rule keeps tensor parallel inside a host's NVLink domain "
               f"(two all-reduces per layer); PP {pp} across hosts moves only the stage boundary's activations")
    not_chosen = (TP_ACROSS_HOSTS_WHY.format(gpus=tp * pp), DP_EP_WHY.format(gpus=tp * pp)) if spec.moe else (
        TP_ACROSS_HOSTS_WHY.format(gpus=tp * pp),)
    return HostsLayout(tp, pp, "pipeline across hosts (vLLM's Ray backend)", tuple(placements), between,
                       tuple(why), not_chosen)
