"""Whether the inventory's model fits its GPUs, for `installer plan`: the GPUs come from the
cloud section (gpu type and count) or from the latest `installer doctor -i` run, the model from
its config.json, and installer/gpu/tuner.py derives the vLLM settings and engine layout."""

from __future__ import annotations

from dataclasses import dataclass, field

from installer.base.errors import InstallerError
from installer.base.runlog import summaries
from installer.gpu import multihost
from installer.gpu.matrix import gpu_type
from installer.gpu.planner import ModelSpec, load_config
from installer.gpu.tuner import HostHardware, Tuned, TuneError
from installer.inventory import Inventory
from installer.planning import engines

NO_GPU_FACTS = (
    "the inventory does not say which GPUs the hosts have; run "
    "`installer doctor -i <inventory>` once and plan again"
)


@dataclass(frozen=True)
class Fit:
    """A layout (tuned), or why there is none: the GPUs are unknown, or the model does not fit."""

    spec: ModelSpec | None = None
    source: str = ""  # where the GPUs were read from
    tuned: Tuned | None = None
    unknown: str = ""  # why nothing could be sized
    refused: TuneError | None = None  # the model does not fit these GPUs
    hosts: list[HostHardware] = field(default_factory=list)  # the hosts it was laid out on
    addresses: dict[str, str] = field(default_factory=dict)  # their inventory addresses, where known

    def layout(self) -> multihost.HostsLayout | None:
        """Ranks per host, links and reasons when the hosts are more than one."""
        if self.tuned is None or self.spec is None:
            return None
        return multihost.describe(self.spec, self.tuned, self.hosts, self.addresses)


def doctor_hosts(inv: Inventory) -> list[HostHardware]:
    """The hosts as the latest `installer doctor -i` of this deployment saw them."""
    for summary in summaries("doctor", inv.deployment):
        hosts = [
            HostHardware.from_facts(h["facts"], h["host"])
            for h in summary.get("hosts", [])
            if h.get("facts", {}).get("gpus")
        ]
        if hosts:
            return hosts
    return []


def gpu_hosts(inv: Inventory) -> tuple[list[HostHardware], str]:
    """(hosts, where their GPUs come from) for planning: the gpu section, as `up` reads it, else
    the cloud section, else doctor facts."""
    declared = engines.declared_hardware(inv)
    if declared:
        return declared, f"gpu: {inv.gpu.count} x {inv.gpu.type} per serving host"
    cloud = inv.cloud
    if cloud is not None and cloud.gpu is not None and cloud.gpu.count:
        gpu = gpu_type(cloud.gpu.type)
        hosts = [
            HostHardware.of_type(f"{inv.deployment}-{i + 1}", gpu, cloud.gpu.count)
            for i in range(cloud.count)
        ]
        return hosts, f"cloud.gpu: {cloud.count} x {cloud.gpu.count} x {gpu.name}"
    hosts = doctor_hosts(inv)
    if hosts:
        return hosts, f"installer doctor: {len(hosts)} host(s) probed"
    return [], ""


def fit(inv: Inventory) -> Fit | None:
    """The model on the inventory's GPUs; None for a CPU deployment."""
    if inv.engine.device != "gpu":
        return None
    try:
        hosts, source = gpu_hosts(inv)
    except InstallerError as exc:  # a cloud GPU type the catalogue does not know
        return Fit(unknown=str(exc))
    if not hosts:
        return Fit(unknown=NO_GPU_FACTS)
    spec = load_config(inv.model.path)
    addresses = {h.name: h.address for h in inv.hosts}
    try:
        tuned = engines.tune_for(inv, hosts)  # the call `up` makes (installer/planning/plan.py)
    except TuneError as exc:
        return Fit(spec, source, refused=exc, hosts=hosts, addresses=addresses)
    return Fit(spec, source, tuned, hosts=hosts, addresses=addresses)
