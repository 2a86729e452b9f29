"""The deployment plan: everything that follows from one inventory, computed once and frozen.

Which hosts serve, which engines each runs (every model's, and a gray release's canaries:
unit, port, full vLLM argv, CUDA_VISIBLE_DEVICES, CPU affinity, environment), where they
listen, which engines every gateway routes to, which host keeps the shared Redis, and the
on-host paths. `build()` has no side effect: it reads the models' config.json for the tuner
and writes nothing. The Ansible renderer (installer/ansible/render.py) only serialises a plan,
`installer plan` prints its engines, and the flows ask it for engine names instead of
recomputing them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from installer.base.errors import InventoryError
from installer.gpu.tuner import Tuned
from installer.inventory import Host, Inventory, ServedModel, profiles, redis_ha
from installer.inventory.topology import HOST_LAYOUT, cross_host, redis_host, serving_hosts
from installer.inventory.weights_source import HostsSource, MirrorSource
from installer.planning import engines
from installer.planning.engines import EngineInstance, ModelEngines, RayNode


@dataclass(frozen=True)
class Upstream:
    """One engine as every gateway routes to it (and relays its /metrics for Prometheus)."""

    name: str
    url: str
    model: str
    task: str = "generate"
    stage: str = "stable"
    # its --max-model-len: the gateway keeps a max_tokens it sets itself within the context
    max_model_len: int | None = None
    # the model's broken streams go on from another of its engines (inventory resume_streams)
    resume_streams: bool = True
    # the serving profile whose recipe resumes the model's reasoning answers (resume_family_of)
    resume_family: str | None = None


@dataclass(frozen=True)
class RedisPlan:
    host: str
    address: str
    port: int
    tls: bool


@dataclass(frozen=True)
class HostPlan:
    host: Host
    groups: tuple[str, ...]
    package_groups: tuple[str, ...]  # groups whose OS packages it installs (with "redis" on the Redis host)
    engines: tuple[EngineInstance, ...]
    engine_names: tuple[str, ...]  # what gateways, drains and metrics labels call its engines
    ray: RayNode | None
    engine_bind_address: str
    engine_tls: bool
    engine_url: str  # its first engine, as the host's checks reach it
    gateway_url: str  # its gateway, as the health check reaches it
    cpu_count: int | None = None  # what preflight counted on the host (nproc); None before preflight
    # its gateway's processes (gateway_workers), resolved here; None for "auto" until its CPUs are counted
    gateway_workers: int | None = None

    @property
    def name(self) -> str:
        return self.host.name


@dataclass(frozen=True)
class DeploymentPlan:
    inventory: Inventory
    hosts: tuple[HostPlan, ...]
    cross_host: bool  # several serving hosts: engines on the network, every gateway routes to all
    upstreams: tuple[Upstream, ...]
    redis: RedisPlan | None
    tuned: Tuned | None = field(default=None, compare=False, repr=False)  # the tuner's reasons, for `plan`
    # Every model's engines per stage (stable, then canaries), with its weights' folder.
    models: tuple[ModelEngines, ...] = ()
    layout: Mapping[str, str] = field(default_factory=lambda: MappingProxyType(dict(HOST_LAYOUT)))
    # which GPUs the engines are laid out for, and where that came from (preflight's probe, the
    # inventory's gpu section); "cpu" or "not known yet" otherwise
    hardware: str = ""

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)

    def engine_names(self, name: str) -> tuple[str, ...]:
        return self.host(name).engine_names

    def serving(self) -> tuple[HostPlan, ...]:
        return tuple(h for h in self.hosts if "serving" in h.groups)

    def weights(self) -> list[dict[str, Any]]:
        """Every weights folder the hosts hold (the model role's `models`): each model's, and a
        canary's own `<folder>.canary` when its weights differ from stable's."""
        stable = {m.served.name: m.model_dir for m in self.models if m.stage == engines.STABLE}
        return [
            {"name": m.served.name, "served_name": m.served.served_name, "dir_name": m.model_dir,
             "task": m.served.task, "stage": m.stage, "hosts": list(m.served.hosts),
             **_weights_source(m.served.model.source)}
            for m in self.models if m.stage == engines.STABLE or m.model_dir != stable[m.served.name]
        ]

    def engine_commands(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(host, unit, vLLM argv) of every engine: what `installer plan` shows and `up` deploys."""
        return [(h.name, e.unit, e.argv) for h in self.hosts for e in h.engines]


def _weights_source(source: object) -> dict[str, Any]:
    """A folder by reference names its source for the model role (docs/weights.md); a bundled
    one adds nothing, so its rendered variables, and a converged host's record, stay as before."""
    if isinstance(source, HostsSource):
        return {"source": {"hosts": source.hosts}}
    if isinstance(source, MirrorSource):
        # the token's file on this machine: the role copies it (no_log) to the host, 0600
        return {"source": {"mirror": source.mirror, "token_src": str(source.token_file or "")}}
    return {}


def _url(scheme: str, address: str, port: int) -> str:
    return f"{scheme}://[{address}]:{port}" if ":" in address else f"{scheme}://{address}:{port}"


def _engine_url(inv: Inventory, host: Host, port: int) -> str:
    if not cross_host(inv):
        return _url("http", "127.0.0.1", port)
    return _url("http" if inv.tls.mode == "off" else "https", host.address, port)


def _names(host: Host, found: list[EngineInstance]) -> tuple[str, ...]:
    """The first engine is named after the host, the others `<host>-<n>`; a Ray worker runs none."""
    return tuple(host.name if e.name == "engine" else f"{host.name}-{e.name.removeprefix('engine-')}" for e in found)


def _host_plan(inv: Inventory, tuned: Tuned | None, host: Host, found: list[EngineInstance]) -> HostPlan:
    on = inv.tls.mode != "off"
    network = cross_host(inv)
    groups = tuple(inv.host_groups(host))
    return HostPlan(
        host=host,
        groups=groups,
        package_groups=(*groups, "redis") if redis_ha.runs_redis(inv, host) else groups,
        engines=tuple(found),
        engine_names=_names(host, found),
        ray=engines.ray_node(inv, tuned, host),
        engine_bind_address=host.address if network else "127.0.0.1",
        engine_tls=on and network,
        engine_url=_engine_url(inv, host, inv.ports.engine),
        # With TLS the gateway is checked by its certificate's address, as clients reach it.
        gateway_url=_url("https" if on else "http", host.address if on else "127.0.0.1", inv.ports.gateway),
        gateway_workers=gateway_workers(inv.gateway.workers, None),
    )


def _check_canary_dirs(models: list[ModelEngines]) -> None:
    """A canary's own weights folder must be no stable model's: installing it would overwrite
    that model's weights. The inventory refuses served names ending `.canary`, so this holds."""
    stable = {m.model_dir: m.served.name for m in models if m.stage == engines.STABLE}
    for m in models:
        other = stable.get(m.model_dir)
        if m.stage != engines.STABLE and other is not None and other != m.served.name:
            raise InventoryError(
                f"the canary of model {m.served.name} would install its weights in {m.model_dir}, "
                f"model {other}'s folder",
                [f"rename model {other}'s served_name: a served name ending .{engines.CANARY} is a canary's folder"],
            )


def _engine_at(inv: Inventory, host: Host, e: EngineInstance) -> str:
    """`model M (canary) on host H (file:line of both)` for a message about an engine."""
    i = next(i for i, h in enumerate(inv.hosts) if h.name == host.name)
    keys = [m.name for m in inv.models] if inv.models is not None else []
    model_loc: tuple[str | int, ...] = ("model",)
    if e.model_key in keys:
        model_loc = ("models", keys.index(e.model_key), "name")
    stage = "" if e.stage == engines.STABLE else f" ({e.stage})"
    return f"model {e.model_key}{stage} on host {host.name} ({inv.where('hosts', i, 'name')}; {inv.where(*model_loc)})"


def _check_engine_names(inv: Inventory, hosts: tuple[HostPlan, ...]) -> None:
    """Every engine's name once in the deployment: the gateways route by it and refuse a name
    given twice, and `<host>-<model>` of one host can be another host's `<host>`."""
    seen: dict[str, tuple[Host, EngineInstance]] = {}
    problems = []
    for h in hosts:
        for name, e in zip(h.engine_names, h.engines, strict=True):
            if name not in seen:
                seen[name] = (h.host, e)
                continue
            first = seen[name]
            hosts_named = sorted({first[0].name, h.name})
            models_named = sorted({x.model_key for x in (first[1], e) if not _primary(inv, x.model_key)})
            fix = " or ".join([*(f"host {n}" for n in hosts_named), *(f"model {n}" for n in models_named)])
            problems.append(
                f"engine name {name!r} is given twice: {_engine_at(inv, *first)} and {_engine_at(inv, h.host, e)}; "
                f"the gateways need each engine's name once (<host>, <host>-<n>, <host>-<model>[-canary]): "
                f"rename {fix}"
            )
    if problems:
        raise InventoryError(f"{len(problems)} engine name(s) given twice in the deployment", problems)


def _primary(inv: Inventory, key: str) -> bool:
    return inv.served_models()[0].name == key


def max_model_len_of(argv: tuple[str, ...]) -> int | None:
    """The engine's --max-model-len (vllm_argv writes it once; extra_args may not repeat it)."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--max-model-len" and value.isdigit():
            return int(value)
    return None


def resume_family_of(served: ServedModel, device: str) -> str | None:
    """The serving profile whose recipe the gateway follows to resume the model's answers with
    reasoning on another engine (service/resume_families.py): the profile's name while its own
    reasoning parser serves the model (a model that overrides the parser is no longer that family)."""
    resolved = profiles.resolve(served.model, device, served.task)
    profile = profiles.PROFILES.get(resolved.profile)
    if profile is None or profile.reasoning_parser is None or resolved.reasoning_parser != profile.reasoning_parser:
        return None
    return profile.name


def gateway_workers(setting: int | str, cpu_count: int | None) -> int | None:
    """A host's gateway processes on the one port (service/prefork.py): the inventory's number,
    or for "auto" one per 8 CPUs, 1 to 8: one event loop relays a few thousand tokens/s, and the
    other CPUs are the engines' (their schedulers, tokenizers and API servers). None for "auto"
    while the host's CPUs are not counted (no preflight ran: the gateway role counts them then)."""
    if isinstance(setting, int):
        return setting
    return None if cpu_count is None else max(1, min(8, cpu_count // 8))


def with_cpu_counts(p: DeploymentPlan, counts: Mapping[str, int]) -> DeploymentPlan:
    """`p` with the CPUs counted on its hosts (preflight's, or those a revision's plan recorded)
    and each one's gateway workers resolved from them. Hosts `counts` leaves out keep theirs."""
    setting = p.inventory.gateway.workers
    hosts = tuple(
        replace(h, cpu_count=counts[h.name], gateway_workers=gateway_workers(setting, counts[h.name]))
        if h.name in counts else h
        for h in p.hosts
    )
    return replace(p, hosts=hosts)


def hardware_of(inv: Inventory, probed: bool) -> str:
    """What the plan says of the hosts' GPUs. One source, in this order: what preflight probed
    (`up`, `upgrade`: preflight_gpu fills gpu.type/count from it), what the inventory declares
    (gpu.type, gpu.count), else none yet (the engines are laid out at preflight). The cloud
    section's GPU type sizes only `installer plan`'s fit table before the machines exist."""
    if inv.engine.device != "gpu":
        return "cpu"
    g = inv.gpu
    if g.type is None or g.count is None:
        return "not known yet: laid out at preflight from the GPUs the hosts report"
    source = "probed by preflight" if probed else "declared: gpu.type, gpu.count"
    return f"{g.count} x {g.type} per serving host ({source})"


def build(inv: Inventory, canaries: Mapping[str, ServedModel] | None = None, *, probed: bool = False) -> DeploymentPlan:
    """The plan of this inventory: every model's engines on its hosts. Raises tuner.TuneError
    when the models do not fit the GPUs the inventory describes (or their engines' ports run
    into another service's), InventoryError when two engines get one name (hosts `h1` and
    `h1-emb` with model emb on h1) or a canary's weights folder is another model's.

    `canaries` (model name -> the new revision's spec, installer/release/): each runs beside
    that model's stable engines, which stay as `inv` says, on the same hosts, as stage canary.
    `probed`: the inventory's gpu.type/count are preflight's findings (hardware_of).

    Each command builds its plan once and passes it down (tests/unit/plan/test_plan_once.py)."""
    tuned = engines.tuned(inv)
    models = engines.layout(inv, tuned, canaries)
    _check_canary_dirs(models)
    found = {h.name: engines.instances(inv, tuned, h, models) for h in inv.hosts}
    engines.check_gpu_shares(inv, models, found)
    hosts = tuple(_host_plan(inv, tuned, h, found[h.name]) for h in inv.hosts)
    _check_engine_names(inv, hosts)
    by_name = {h.name: h for h in hosts}
    resumes = {m.served_name: m.model.resume_streams for m in inv.served_models()}
    families = {m.served_name: resume_family_of(m, inv.engine.device) for m in inv.served_models()}
    upstreams = tuple(
        Upstream(name, _engine_url(inv, host, e.port), e.served_name, e.task, e.stage, max_model_len_of(e.argv),
                 resumes.get(e.served_name, True), families.get(e.served_name))
        for host in serving_hosts(inv)
        for name, e in zip(by_name[host.name].engine_names, by_name[host.name].engines, strict=True)
    )
    rh = redis_host(inv)
    net = cross_host(inv)  # one serving host: Redis on loopback for its own gateway, where TLS adds nothing
    redis = None if rh is None else RedisPlan(rh.name, rh.address if net else "127.0.0.1", inv.ports.redis,
                                              net and inv.tls.mode != "off")
    return DeploymentPlan(inv, hosts, cross_host(inv), upstreams, redis, tuned, models=tuple(models),
                          hardware=hardware_of(inv, probed))


def plan_before_preflight(inv: Inventory) -> DeploymentPlan | None:
    """What `installer plan` can promise before any host is probed (machines not made yet).
    None for a GPU inventory without gpu.type/gpu.count: `up` lays those engines out at
    preflight, from the GPUs the hosts report."""
    if inv.engine.device == "gpu" and engines.declared_hardware(inv) is None:
        return None
    return build(inv)


def engine_commands_before_preflight(inv: Inventory) -> list[tuple[str, str, tuple[str, ...]]] | None:
    """Every engine's (host, unit, argv) of plan_before_preflight."""
    found = plan_before_preflight(inv)
    return None if found is None else found.engine_commands()
