"""The support archive's layout, manifest and writing.

    pli-support-<deployment>-<UTC time>/
      MANIFEST.json        what is in it, per host: collected, missing (why), excluded, redactions
      MISSING.txt          what could not be collected and why, one line each
      status.json          `installer status --json`
      prometheus.csv       the key series of the last hour, every host
      hosts/<host>/        nvidia-smi-q.txt, gpu-metrics.csv, kernel-xid.log, journal/<unit>.log,
                           units.txt, config/<path on the host>, versions.json, status.json,
                           prometheus.csv

Files are already redacted when they get here (installer/diagnostics/redact.py). The archive is
written 0600 and atomically: it holds configuration and logs, and a half-written one is never
left under its final name.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer import __version__
from installer.base.files import atomic_write
from installer.diagnostics.redact import Hit


@dataclass
class Part:
    """The files of one host (or, with name "", the deployment's own), paths relative to its
    folder, with what could not be collected (path -> why) and what was left out on purpose."""

    name: str
    files: dict[str, bytes] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    excluded: list[dict[str, str]] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)

    @property
    def folder(self) -> str:
        return f"hosts/{self.name}/" if self.name else ""


def root_name(deployment: str, taken_at: float) -> str:
    return f"pli-support-{deployment}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(taken_at))}"


def manifest(deployment: str, taken_at: float, parts: list[Part]) -> dict[str, Any]:
    def entry(p: Part) -> dict[str, Any]:
        return {
            "collected": sorted(p.files),
            "missing": dict(sorted(p.missing.items())),
            "excluded": p.excluded,
            "redactions": [h.to_json() for h in p.hits],
        }

    return {
        "format": 1,
        "deployment": deployment,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(taken_at)),
        "installer_version": __version__,
        "deployment_files": entry(next((p for p in parts if not p.name), Part(""))),
        "hosts": {p.name: entry(p) for p in parts if p.name},
        # every redaction by its path in the archive: the file and the rule, never the value
        "redactions": [{**h.to_json(), "file": p.folder + h.file} for p in parts for h in p.hits],
    }


def missing_text(parts: list[Part]) -> str:
    lines = ["What could not be collected, and why (MANIFEST.json has the same per host).", ""]
    for p in parts:
        for path, why in sorted(p.missing.items()):
            lines.append(f"{p.name or 'deployment'}: {path}: {why}")
    if len(lines) == 2:
        lines.append("Everything was collected.")
    return "\n".join(lines) + "\n"


def layout(deployment: str, taken_at: float, parts: list[Part]) -> dict[str, bytes]:
    """Every member of the archive, by its path under the root folder."""
    files = {
        "MANIFEST.json": (json.dumps(manifest(deployment, taken_at, parts), indent=1) + "\n").encode(),
        "MISSING.txt": missing_text(parts).encode(),
    }
    for p in parts:
        for path, data in sorted(p.files.items()):
            files[p.folder + path] = data
    return files


def write(path: Path, root: str, files: dict[str, bytes], taken_at: float) -> Path:
    """`files` as `path` (a .tar.gz, 0600, replaced atomically), under the folder `root`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in (root + "/", *(f"{root}/{n}" for n in files)):
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime = int(taken_at)
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o700
                tar.addfile(info)
                continue
            data = files[name[len(root) + 1:]]
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    atomic_write(path, buf.getvalue(), 0o600)
    return path
