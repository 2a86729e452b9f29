"""NVIDIA's driver, CUDA, NCCL and fabric manager .debs into the bundle's apt repository.

NVIDIA's package repositories are not reachable from an air-gapped site (nor from every build
machine), so the user downloads the .debs on a connected machine (NVIDIA's CUDA repository, or
a mirror of it) into a folder and names it in the inventory as `gpu.packages_dir`. The build
copies them into the bundle's flat apt repository (debs/, the one the GPU roles install from)
after checking, before anything reaches a host, that the folder holds what the roles will ask
apt for: the driver branch the matrix picks for the inventory's CUDA version (and pin), the
toolkit of that CUDA version, NCCL built for it, and the fabric manager of the driver's exact
version; and that every dependency between those packages is satisfied inside the folder.

The package names are those of the hosts' target as NVIDIA's repository for that release
publishes them (bundle/nvidia_names.py: Ubuntu's server driver names on ubuntu-*,
cuda-drivers-<branch> on debian-*); the toolkit, NCCL and fabric manager names come from the
roles' own defaults, the same on every release.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import jinja2

from installer.base.errors import BundleError
from installer.base.paths import role_defaults
from installer.bundle import aptrepo, nvidia_names
from installer.gpu import matrix
from installer.inventory import Inventory


def branches(inv: Inventory) -> dict[int, str]:
    """{driver branch: kernel modules ("open"/"proprietary")} the hosts may pick for this inventory.

    One entry when gpu.generation or gpu.driver_branch decides it; otherwise every branch the
    matrix picks for some generation this CUDA version supports (usually one).
    """
    plan = matrix.plan_table(inv.gpu.cuda, pin=inv.gpu.driver_branch)["generations"]
    gens = [inv.gpu.generation] if inv.gpu.generation else list(plan)
    return {plan[g]["branch"]: plan[g]["kernel_modules"] for g in gens if not plan[g]["error"]}


def wanted(inv: Inventory, target: str) -> dict[str, list[str]]:
    """{role: [package names]} the GPU roles install by name on this inventory's `target` hosts."""
    cuda = inv.gpu.cuda
    want: dict[str, list[str]] = {"nvidia_driver": [], "fabricmanager": []}
    for branch, modules in sorted(branches(inv).items()):
        want["nvidia_driver"] += nvidia_names.driver_packages(target, branch, modules == "open")
        want["fabricmanager"].append(
            role_defaults("fabricmanager")["fabricmanager_package"].replace("{branch}", str(branch))
        )
    cuda_defaults = role_defaults("cuda")
    want["cuda"] = [
        jinja2.Template(t).render({**cuda_defaults, "cuda_version": cuda}) for t in cuda_defaults["cuda_packages"]
    ]
    want["nccl"] = list(role_defaults("nccl")["nccl_packages"])
    return want


def _upstream(version: str) -> str:
    """'1:570.195.03-0ubuntu1' -> '570.195.03'."""
    return version.split(":")[-1].rsplit("-", 1)[0]


def _version_ok(have: str, op: str, want: str) -> bool:
    ops = {"=": "eq", ">=": "ge", "<=": "le", ">>": "gt", "<<": "lt", ">": "ge", "<": "le"}
    proc = subprocess.run(["dpkg", "--compare-versions", have, ops[op], want], check=False)
    return proc.returncode == 0


_DEP = re.compile(r"^\s*([a-z0-9][a-z0-9+.-]+)(?::\w+)?\s*(?:\(\s*([<>=]+)\s*([^)\s]+)\s*\))?\s*$")


def unmet(index: list[dict[str, str]]) -> list[str]:
    """Depends/Pre-Depends of the packages in `index` that nothing in `index` satisfies."""
    provided: dict[str, list[str]] = {}
    for p in index:
        provided.setdefault(p["Package"], []).append(p["Version"])
        for prov in filter(None, (x.strip() for x in p.get("Provides", "").split(","))):
            m = _DEP.match(prov)
            if m:
                provided.setdefault(m[1], []).append(m[3] or p["Version"])
    missing = []
    for p in index:
        for field in ("Pre-Depends", "Depends"):
            for group in filter(None, (g.strip() for g in p.get(field, "").split(","))):
                alternatives = [_DEP.match(a) for a in group.split("|")]
                if not any(
                    m and any(not m[2] or _version_ok(v, m[2], m[3]) for v in provided.get(m[1], []))
                    for m in alternatives
                ):
                    missing.append(f"{p['Package']} {p['Version']} needs {group}")
    return sorted(set(missing))


def check(inv: Inventory, index: list[dict[str, str]], target: str) -> list[str]:
    """Problems of a GPU package folder for this inventory's `target` hosts; empty when the roles
    will find everything."""
    cuda = inv.gpu.cuda
    have: dict[str, list[str]] = {}
    for p in index:
        have.setdefault(p["Package"], []).append(p["Version"])
    problems = []
    want = wanted(inv, target)
    for role in ("nvidia_driver", "cuda"):
        problems += [f"{name} is missing (role {role})" for name in want[role] if name not in have]
    for name in want["nccl"]:
        builds = [v for v in have.get(name, []) if v.endswith(f"+cuda{cuda}")]
        if not builds:
            problems.append(f"{name} built for CUDA {cuda} (a version ending +cuda{cuda}) is missing (role nccl)")
    driver_names = want["nvidia_driver"]
    for fm in want["fabricmanager"]:
        branch = fm.rsplit("-", 1)[-1]
        # By version, not name: Debian's driver packages (nvidia-kernel-open-dkms) hold no branch.
        drivers = {_upstream(v) for n in driver_names for v in have.get(n, []) if _upstream(v).startswith(f"{branch}.")}
        fms = {_upstream(v) for v in have.get(fm, [])}
        # Fabric manager runs only at the driver's exact version (needed on NVSwitch hosts only).
        if fms and drivers and not drivers & fms:
            problems.append(
                f"{fm} {', '.join(sorted(fms))} does not match driver {', '.join(sorted(drivers))}: "
                "fabric manager must be the driver's exact version"
            )
    # NVIDIA-only packages must travel in the folder; others come from the host's distribution.
    return problems + [u for u in unmet(index) if _NVIDIA_ONLY.match(u.split(" needs ", 1)[1])]


# Packages only NVIDIA's repository has: a host cannot get them from its distribution's mirror.
_NVIDIA_ONLY = re.compile(r"(nvidia|libnvidia|cuda|libcu|libnccl|libnpp|libnvjpeg|nsight|libxnvctrl)")
HOST_DEPENDENCIES = "gpu-host-dependencies.txt"


def add_to_bundle(inv: Inventory, debs_dir: Path, target: str) -> list[dict[str, str]]:
    """Copy gpu.packages_dir's .debs into the `target` hosts' repository (debs_dir) and re-index it.

    Returns manifest package entries for them (groups "": the GPU roles install them by name,
    not the common role). Nothing to do for CPU deployments or without gpu.packages_dir.
    """
    src = inv.gpu.packages_dir
    if inv.engine.device != "gpu" or src is None:
        return []
    found = sorted(src.glob("*.deb")) if src.is_dir() else []
    if not found:
        raise BundleError(
            f"gpu.packages_dir {src} has no .deb files",
            ["download the driver, CUDA toolkit, NCCL and fabric manager .debs from NVIDIA's CUDA "
             "repository on a connected machine into it (see docs/gpu.md)"],
        )
    problems = check(inv, aptrepo.index_of(found, debs_dir.parent / ".gpu-check"), target)
    if problems:
        raise BundleError(
            f"gpu.packages_dir {src} is not what the GPU roles need for CUDA {inv.gpu.cuda} on {target} "
            f"hosts (NVIDIA's {nvidia_names.repo_folder(target)} repository)",
            problems[:20],
        )
    entries = []
    for deb in aptrepo.copy_debs(found, debs_dir):
        fields = dict(aptrepo.parse_paragraph(aptrepo.control_text(deb)))
        entries.append({
            "name": fields["Package"], "groups": "", "version": fields["Version"], "file": f"debs/{deb.name}",
        })
    index = aptrepo.write_index(debs_dir)
    # What the hosts' own distribution must provide (libc6, ...): listed in the signed bundle.
    from_host = [u for u in unmet(index) if not _NVIDIA_ONLY.match(u.split(" needs ", 1)[1])]
    (debs_dir.parent / HOST_DEPENDENCIES).write_text("".join(f"{u}\n" for u in from_host))
    return entries


def bundle_input(inv: Inventory) -> list[tuple[str, int, int]]:
    """What of gpu.packages_dir decides the bundle (its cache key): names, sizes, mtimes."""
    src = inv.gpu.packages_dir
    if inv.engine.device != "gpu" or src is None or not src.is_dir():
        return []
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(src.glob("*.deb"))]
