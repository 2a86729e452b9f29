"""Upstream Prometheus, Alertmanager and node_exporter release tarballs into the bundle.

`monitoring.install_from: tarballs` replaces Debian's packages with the release tarballs the
projects publish (github.com/prometheus/*/releases), for sites that standardise on upstream
versions. The user downloads them on a connected machine into `monitoring.tarballs_dir`, with
their upstream names; inventory_checks checks the folder (file:line errors, before any host
is touched), the bundle carries them under monitoring/ (checksummed in the manifest like every
other file) with monitoring/tarballs.json naming each one, and the monitoring role unpacks them on
the hosts (playbooks/roles/monitoring/tasks/tarballs.yml). Hosts never download anything.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from installer.inventory.models import Inventory

Loc = tuple[str | int, ...]
# The bundle's hosts are x86_64 (build.TARGET): upstream calls that linux-amd64.
PLATFORM = "linux-amd64"
# Each tarball's programs, in its top folder (<component>-<version>.linux-amd64/).
COMPONENTS: dict[str, tuple[str, ...]] = {
    "prometheus": ("prometheus", "promtool"),
    "alertmanager": ("alertmanager", "amtool"),
    "node_exporter": ("node_exporter",),
}
BUNDLE_DIR = "monitoring"
INDEX = "tarballs.json"
_NAME = re.compile(
    r"^(?P<component>[a-z_]+)-(?P<version>[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.]+)?)"
    r"\.(?P<platform>[a-z0-9]+-[a-z0-9]+)\.tar\.gz$"
)
_LOC: Loc = ("monitoring", "tarballs_dir")


@dataclass(frozen=True)
class Tarball:
    component: str
    version: str
    path: Path

    @property
    def top(self) -> str:
        """The folder the tarball unpacks into, as upstream names it."""
        return f"{self.component}-{self.version}.{PLATFORM}"


def find(folder: Path) -> tuple[dict[str, Tarball], list[str]]:
    """({component: tarball}, problems) of a tarballs_dir, from file names only."""
    found: dict[str, list[Tarball]] = {}
    problems = []
    for path in sorted(folder.glob("*.tar.gz")):
        m = _NAME.match(path.name)
        if m is None or m["component"] not in COMPONENTS:
            problems.append(
                f"{path.name} is not an upstream release tarball name; expected "
                f"<{'|'.join(COMPONENTS)}>-<version>.{PLATFORM}.tar.gz"
            )
            continue
        if m["platform"] != PLATFORM:
            problems.append(f"{path.name} is for {m['platform']}; the hosts need the {PLATFORM} build")
            continue
        found.setdefault(m["component"], []).append(Tarball(m["component"], m["version"], path))
    chosen = {}
    for component in COMPONENTS:
        tarballs = found.get(component, [])
        if not tarballs:
            problems.append(
                f"no {component} tarball in {folder}; download {component}-<version>.{PLATFORM}.tar.gz "
                f"from github.com/prometheus/{component}/releases into it"
            )
        elif len(tarballs) > 1:
            names = ", ".join(t.path.name for t in tarballs)
            problems.append(f"{len(tarballs)} {component} tarballs ({names}); keep the one version to install")
        else:
            chosen[component] = tarballs[0]
    return chosen, problems


@cache
def _layout(path: Path, size: int, mtime_ns: int, top: str, programs: tuple[str, ...]) -> str:
    """'' or what is wrong inside one tarball (cached per file version: commands load the
    inventory more than once, and reading a 100 MB tarball takes a second)."""
    want = {f"{top}/{p}" for p in programs}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name in want:
                    if not member.isfile() or not member.mode & 0o100:
                        return f"{name} is not an executable file"
                    want.discard(name)
                    if not want:
                        return ""
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"cannot be read as a .tar.gz ({exc})"
    return (
        f"unknown layout: {', '.join(sorted(want))} missing (upstream tarballs hold "
        f"{top}/{' and '.join(programs)}); download the release tarball itself, not a repack"
    )


def layout_problem(tarball: Tarball) -> str:
    st = tarball.path.stat()
    problem = _layout(tarball.path, st.st_size, st.st_mtime_ns, tarball.top, COMPONENTS[tarball.component])
    return f"{tarball.path.name}: {problem}" if problem else ""


def check(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    """Problems of monitoring.tarballs_dir, as (inventory location, problem) for inventory_checks."""
    folder = inv.monitoring.tarballs_dir
    if inv.monitoring.install_from != "tarballs" or folder is None:
        return
    if not folder.is_dir():
        yield _LOC, f"{folder} is not a directory; point it at the folder holding the release tarballs"
        return
    chosen, problems = find(folder)
    problems += [p for p in (layout_problem(t) for t in chosen.values()) if p]
    for problem in problems:
        yield _LOC, problem


def bundle_input(inv: Inventory) -> list[tuple[str, int, int]]:
    """What of tarballs_dir decides the bundle (its cache key): names, sizes, mtimes."""
    folder = inv.monitoring.tarballs_dir
    if inv.monitoring.install_from != "tarballs" or folder is None or not folder.is_dir():
        return []
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.tar.gz"))]


def add_to_bundle(inv: Inventory, root: Path) -> dict[str, str]:
    """Copy the tarballs to root/monitoring/ with an index the role reads; {component: version}.

    `validate` and `up` already refused a folder with problems (inventory_checks); checked again
    here because a file may have changed since, and `bundle build` runs no inventory checks.
    """
    folder = inv.monitoring.tarballs_dir
    if inv.monitoring.install_from != "tarballs" or folder is None:
        return {}
    from installer.base.errors import BundleError

    problems = [p for _loc, p in check(inv)]
    if problems:
        raise BundleError(f"monitoring.tarballs_dir {folder} cannot go into the bundle", problems)
    chosen, _ = find(folder)
    dest = root / BUNDLE_DIR
    dest.mkdir(parents=True, exist_ok=True)
    index = {}
    for component, tarball in sorted(chosen.items()):
        shutil.copy2(tarball.path, dest / tarball.path.name)
        index[component] = {"version": tarball.version, "file": tarball.path.name, "top": tarball.top}
    (dest / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return {f"{component}-tarball": entry["version"] for component, entry in index.items()}
