"""GPU preflight: what a GPU deployment needs from each host, judged before any host changes.

The same SSH round trip as the rest of preflight (installer/preflight/hosts.py) runs PROBE, which
reads nvidia-smi, the /dev/nvidia* nodes and NVIDIA display devices in sysfs. From those facts:

- a GPU inventory (engine.device gpu) on a host with no NVIDIA GPU is refused;
- a driver older than the bundle's CUDA needs (installer/gpu/matrix.py CUDA_MIN_DRIVER) is
  refused unless the bundle carries NVIDIA's driver packages (gpu.packages_dir), which the
  nvidia_driver role installs;
- declared gpu.type/gpu.count that the host contradicts are refused, naming both;
- fp8 weights on GPUs without fp8 tensor cores are refused (the inventory's serving profiles);
- `with_probed_hardware` fills gpu.type/gpu.count from the probe when the inventory leaves them
  out, so engines are laid out for the GPUs the hosts have; `plan_probed` builds the plan for
  them and refuses a model that does not fit (installer/gpu/tuner.py through installer/planning/engines.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from installer.base.errors import PreflightError
from installer.gpu import matrix
from installer.gpu.tuner import TuneError
from installer.inventory import Inventory, profile_checks

T = TypeVar("T")

# Lines of `key=value`, appended to preflight's probe. nvidia-smi's rows are joined with ';'
# (GPU names hold no ';') because the probe's parser keeps one value per key.
PROBE = r"""
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smi=yes"
  rows=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits 2>&1)
  echo "gpu_rows=$(printf '%s' "$rows" | tr '\n' ';')"
else
  echo "gpu_smi=no"
fi
echo "gpu_dev=$(ls -d /dev/nvidia[0-9]* 2>/dev/null | wc -l)"
n=0
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
  case "$(cat "$d/class" 2>/dev/null)" in 0x03*) n=$((n+1));; esac
done
echo "gpu_pci=$n"
"""

_DRIVER_PACKAGE = re.compile(r"nvidia-driver-\d+")


@dataclass(frozen=True)
class GPUNeeds:
    """What the inventory and the bundle ask of a GPU host."""

    cuda: str  # gpu.cuda: the CUDA version the engines are built for
    declared_type: str | None  # gpu.type (a key of matrix.GPU_TYPES)
    declared_count: int | None  # gpu.count
    where_type: str  # `file:line: gpu.type` for messages
    where_count: str
    where_cuda: str
    # The bundle carries NVIDIA's driver packages (gpu.packages_dir): an old or missing driver is
    # the nvidia_driver role's to install, not a refusal.
    driver_in_bundle: bool
    # The models whose weights are fp8 (installer/inventory/profile_checks.py fp8_weights): GPUs
    # without fp8 tensor cores are refused for them.
    fp8_weights: tuple[str, ...] = ()


def needs(inv: Inventory, packages: list[dict[str, str]]) -> GPUNeeds | None:
    """The GPU needs of a deployment; None for a CPU one."""
    if inv.engine.device != "gpu":
        return None
    return GPUNeeds(
        cuda=inv.gpu.cuda,
        declared_type=inv.gpu.type,
        declared_count=inv.gpu.count,
        where_type=inv.where("gpu", "type"),
        where_count=inv.where("gpu", "count"),
        where_cuda=inv.where("gpu", "cuda") if "cuda" in inv.gpu.model_fields_set else "gpu.cuda's default",
        driver_in_bundle=any(_DRIVER_PACKAGE.match(p.get("name", "")) for p in packages),
        fp8_weights=profile_checks.fp8_weights(inv),
    )


@dataclass(frozen=True)
class ProbedGPU:
    name: str
    memory_mib: int
    driver: str


@dataclass(frozen=True)
class Probed:
    """A host's GPUs as the probe saw them."""

    gpus: list[ProbedGPU] = field(default_factory=list)
    smi: bool = False  # nvidia-smi is installed
    smi_error: str = ""  # what nvidia-smi said when it listed no GPU
    devices: int = 0  # /dev/nvidia[0-9]* nodes
    pci: int = 0  # NVIDIA display/3D controllers in sysfs

    @property
    def driver(self) -> str:
        return self.gpus[0].driver if self.gpus else ""

    @property
    def names(self) -> list[str]:
        return sorted({g.name for g in self.gpus})


def parse(facts: Mapping[str, str]) -> Probed:
    gpus, errors = [], []
    for row in facts.get("gpu_rows", "").split(";"):
        cols = [c.strip() for c in row.split(",")]
        if len(cols) == 3 and cols[1].isdigit():
            gpus.append(ProbedGPU(cols[0], int(cols[1]), cols[2]))
        elif row.strip():
            errors.append(row.strip())
    return Probed(
        gpus=gpus,
        smi=facts.get("gpu_smi") == "yes",
        smi_error=" ".join(errors)[:200],
        devices=int(facts.get("gpu_dev") or 0),
        pci=int(facts.get("gpu_pci") or 0),
    )


def newest_cuda(driver: str) -> str:
    """The newest CUDA version in the matrix this driver runs; "" when none."""
    fits = [c for c, need in matrix.CUDA_MIN_DRIVER.items()
            if matrix.version_tuple(driver) >= matrix.version_tuple(need)]
    return max(fits, key=matrix.version_tuple, default="")


def judge(facts: Mapping[str, str], gpu: GPUNeeds | None) -> list[str]:
    """Problems that stop a GPU deployment on this host (each with its fix); [] when fit."""
    if gpu is None:
        return []
    p = parse(facts)
    if not p.gpus and not p.pci and not p.devices:
        return [
            "engine.device is gpu but this host has no NVIDIA GPU (no nvidia-smi GPU, no /dev/nvidia* "
            "device, no NVIDIA display controller on PCI); deploy to a GPU host, or set engine.device: cpu"
        ]
    if not p.gpus:
        if gpu.driver_in_bundle:
            return []  # GPUs without a working driver: the nvidia_driver role installs one
        why = (
            f"nvidia-smi lists no GPU ({p.smi_error or 'no output'})" if p.smi
            else "no nvidia-smi: the NVIDIA driver is not installed"
        )
        return [
            f"{max(p.pci, p.devices)} NVIDIA GPU(s) but {why}; install driver R"
            f"{matrix.branch_of(matrix.CUDA_MIN_DRIVER[gpu.cuda])} or newer, or build the bundle with "
            "gpu.packages_dir holding NVIDIA's driver packages (docs/gpu.md)"
        ]
    problems = []
    need = matrix.CUDA_MIN_DRIVER[gpu.cuda]
    if matrix.version_tuple(p.driver) < matrix.version_tuple(need) and not gpu.driver_in_bundle:
        runs = newest_cuda(p.driver)
        problems.append(
            f"driver {p.driver} is older than CUDA {gpu.cuda} needs (>= {need}, {gpu.where_cuda}); "
            f"upgrade the driver to R{matrix.branch_of(need)} or newer, or build the bundle with "
            "gpu.packages_dir holding it (the nvidia_driver role installs it)"
            + (f", or set gpu.cuda to {runs} with an engine built for it" if runs else "")
        )
    if len(p.names) > 1:
        problems.append(
            f"mixed GPUs ({', '.join(p.names)}); the engines are laid out for one GPU type per host"
        )
    probed_type = matrix.gpu_type_of_name(p.gpus[0].name)
    if gpu.declared_type is not None and (probed_type is None or probed_type.key != gpu.declared_type):
        has = f"{p.gpus[0].name} ({probed_type.key if probed_type else 'a type installer/gpu/matrix.py does not list'})"
        problems.append(
            f"{gpu.where_type} is {gpu.declared_type} but the host has {has}; "
            "correct gpu.type, or remove it to use what the host has"
        )
    fp8 = profile_checks.fp8_gpu_problem(gpu.fp8_weights, p.gpus[0].name)
    if fp8 is not None:
        problems.append(fp8)
    if gpu.declared_count is not None and gpu.declared_count != len(p.gpus):
        problems.append(
            f"{gpu.where_count} is {gpu.declared_count} but the host has {len(p.gpus)} GPU(s); "
            "correct gpu.count, or remove it to use what the host has"
        )
    return problems


def with_probed_hardware(
    inv: Inventory, facts: Mapping[str, Mapping[str, str]], note: Callable[[str], None] = lambda _m: None
) -> Inventory:
    """The inventory the deployment is laid out with: gpu.type/gpu.count as declared, or as the
    serving hosts' probes show them when left out (the same object when nothing was filled in).
    `facts`: preflight's facts per host name. plan_probed() then builds its plan."""
    if inv.engine.device != "gpu" or (inv.gpu.type is not None and inv.gpu.count is not None):
        return inv
    seen: dict[tuple[str, int], list[str]] = {}
    for host in inv.hosts:
        if "serving" in host.groups and host.name in facts:
            p = parse(facts[host.name])
            seen.setdefault((p.gpus[0].name if p.gpus else "", len(p.gpus)), []).append(host.name)
    if len(seen) > 1:
        raise PreflightError(
            "the serving hosts have different GPUs; hosts of one deployment must be identical "
            "(or split them into deployments); no host was changed",
            [f"{', '.join(names)}: {count}x {name or 'no GPU listed'}" for (name, count), names in seen.items()],
        )
    if not seen:
        return inv
    ((name, count),) = seen
    probed = matrix.gpu_type_of_name(name) if name else None
    if probed is None or not count:
        note(f"GPUs {name or '(none listed yet)'}: not a type installer/gpu/matrix.py knows; one engine per host")
        return inv
    gpu = inv.gpu.model_copy(update={
        "type": inv.gpu.type or probed.key,
        "count": inv.gpu.count or count,
    })
    note(f"GPUs from the hosts: {gpu.count}x {probed.name} per serving host (gpu.type {gpu.type})")
    return inv.model_copy(update={"gpu": gpu})


def plan_probed(laid_out: Inventory, build: Callable[[Inventory], T]) -> T:
    """`build(laid_out)` for an inventory with_probed_hardware filled in: a model that does not
    fit the probed GPUs is refused as preflight's finding, before any host changes."""
    try:
        return build(laid_out)
    except TuneError as exc:
        gpu = laid_out.gpu
        name = matrix.GPU_TYPES[gpu.type].name if gpu.type in matrix.GPU_TYPES else gpu.type
        raise PreflightError(
            f"the model does not fit the hosts' GPUs ({gpu.count}x {name}, probed): {exc}; "
            "no host was changed",
            exc.details,
        ) from None
