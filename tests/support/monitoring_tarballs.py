"""Upstream-layout Prometheus release tarballs: built from the Debian binaries on this machine
(upstream_tarballs), or tiny ones of shell scripts for checks that read only the layout (tarball).

Upstream release tarballs are <name>-<version>.linux-amd64/ holding exactly these Go programs
(plus LICENSE/NOTICE and, for Prometheus 2.x, example consoles the role does not use), so the
monitoring role sees what it would see in a real download. Two differences, both Debian's build
and not the role's business: Debian links against glibc where upstream's builds are static, and
Debian patches Alertmanager to read its notification templates from
/usr/share/prometheus/alertmanager/*.tmpl where upstream compiles them in (DEBIAN_AM_TEMPLATES:
a host running this Alertmanager needs those files there).
"""

import io
import re
import subprocess
import tarfile
import time
from pathlib import Path

from installer.bundle import monitoring_tarballs

DEBIAN_AM_TEMPLATES = Path("/usr/share/prometheus/alertmanager")
# (component, {name in the tarball: Debian's binary})
PROGRAMS = {
    "prometheus": {"prometheus": "/usr/bin/prometheus", "promtool": "/usr/bin/promtool"},
    "alertmanager": {"alertmanager": "/usr/bin/prometheus-alertmanager", "amtool": "/usr/bin/amtool"},
    "node_exporter": {"node_exporter": "/usr/bin/prometheus-node-exporter"},
}


# Versions of the tiny tarballs (what upstream released in 2025).
VERSIONS = {"prometheus": "2.53.4", "alertmanager": "0.28.1", "node_exporter": "1.9.1"}


def tarball(folder: Path, component: str, version: str, *, platform: str = "linux-amd64",
            top: str | None = None, programs: tuple[str, ...] | None = None) -> Path:
    """A tarball laid out as upstream's releases: <component>-<version>.<platform>/<programs>."""
    top = f"{component}-{version}.{platform}" if top is None else top
    path = folder / f"{component}-{version}.{platform}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in ("LICENSE", *(monitoring_tarballs.COMPONENTS[component] if programs is None else programs)):
            data = f"#!/bin/sh\necho {name}\n".encode()
            info = tarfile.TarInfo(f"{top}/{name}".lstrip("/"))
            info.size, info.mode = len(data), 0o644 if name == "LICENSE" else 0o755
            tar.addfile(info, io.BytesIO(data))
    return path


def _version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True, timeout=30)
    m = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert m, out.stdout + out.stderr
    return m[1]


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def upstream_tarballs(dest: Path) -> dict[str, str]:
    """Write the three tarballs into `dest`; return {component: version}."""
    versions = {}
    for component, programs in PROGRAMS.items():
        missing = [b for b in programs.values() if not Path(b).is_file()]
        if missing:
            raise AssertionError(f"{missing} missing: `bash .ci/setup` installs Debian's prometheus packages")
        version = _version(next(iter(programs.values())))
        top = f"{component}-{version}.linux-amd64"
        with tarfile.open(dest / f"{top}.tar.gz", "w:gz", compresslevel=1) as tar:
            _add(tar, f"{top}/LICENSE", b"Apache License 2.0\n", 0o644)
            for name, binary in programs.items():
                _add(tar, f"{top}/{name}", Path(binary).read_bytes(), 0o755)
        versions[component] = version
    return versions
