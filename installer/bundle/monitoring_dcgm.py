"""dcgm-exporter from the bundle: when the .debs of gpu.packages_dir (NVIDIA's repository, which
ships DCGM and its exporter) include the dcgm-exporter package, the serving hosts install it and
the monitoring role runs it instead of our NVML exporter (its default monitoring_gpu_exporter
picks dcgm when the package is among the host's common_packages).

gpu_packages.add_to_bundle copies every .deb of the folder into the bundle's apt repository but
names none for a host group (the GPU roles install theirs by name). This marks the exporter for
the `serving` group, so the common role installs it, pinned, with DCGM as its dependency from the
same repository. The package name comes from the role's defaults (one source of truth).
"""

from installer.base.paths import role_defaults
from installer.inventory import Inventory


def exporter_package() -> str:
    return str(role_defaults("monitoring")["monitoring_dcgm_exporter_package"])


def mark(inv: Inventory, packages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The bundle's package entries with dcgm-exporter's set to install on the serving hosts."""
    if inv.engine.device != "gpu":
        return packages
    out = []
    for entry in packages:
        if entry["name"] == exporter_package():
            groups = set(filter(None, entry.get("groups", "").split(","))) | {"serving"}
            entry = {**entry, "groups": ",".join(sorted(groups))}
        out.append(entry)
    return out


def carried(packages: list[dict[str, str]]) -> bool:
    """Whether a bundle's packages include dcgm-exporter for the serving hosts."""
    return any(p["name"] == exporter_package() and "serving" in p.get("groups", "").split(",") for p in packages)
