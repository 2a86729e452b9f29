"""`installer verify --weights`: every weights folder each host serves, hashed whole on the host
against the signed list of the revision it runs, ignoring the verifier's cache (docs/weights.md).

The cache lets a converged `up` read nothing; this is the check that reads every byte, for what
the cache cannot see (a byte a device error flipped under the filesystem, an edit that kept the
size, mtime and ctime). It runs the same verifier the model role ships (weights/verify.py, sent
on stdin: nothing is installed for it), on every host at once, and refreshes the cache with what
it found. The list: a bundled folder's files from the bundle's manifest.json (model/ or
models/<folder>/), a folder by reference its entry in weights_by_reference; both in the
manifest.json the push checked on the host against the signed one.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from installer.base.errors import InstallerError
from installer.bundle import weights
from installer.bundle.push import HOST_BUNDLES
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT
from installer.inventory.weights_source import HostsSource
from installer.state import revisions

VERIFIER = Path(__file__).resolve().parents[1] / "weights" / "verify.py"
CACHE_DIR = f"{HOST_LAYOUT['pli_state_dir']}/weights/cache"
MODELS = f"{HOST_LAYOUT['pli_state_dir']}/models"
TIMEOUT_S = 3600.0  # 700 GB at 1 GB/s is 12 minutes; a slow disk may take longer


@dataclass(frozen=True)
class Folder:
    host: str
    folder: str
    root: str  # on the host
    args: tuple[str, ...]  # the verifier's arguments naming the list


@dataclass(frozen=True)
class Checked:
    folder: Folder
    ok: bool
    problems: list[str]
    files: int
    size: int
    seconds: float


def folders(inv: Inventory, host: Host, bundle_id: str) -> list[Folder]:
    """Every weights folder `host` serves in the revision it runs (stable's; a gray release's
    canary folder is not among them)."""
    manifest = f"{HOST_BUNDLES}/{bundle_id[:24]}/manifest.json"
    served = [m for m in inv.served_models() if host.name in m.hosts]
    primary = inv.served_models()[0].model.dir_name
    found = []
    for m in served:
        folder = m.model.dir_name
        source = m.model.source
        # hosts: the operator's folder; bundle and mirror: the installer's, models/<folder>
        root = source.hosts if isinstance(source, HostsSource) else f"{MODELS}/{folder}"
        if source == "bundle":
            args: tuple[str, ...] = ("--manifest", manifest, "--prefix", weights.bundle_dir(folder, primary) + "/")
        else:
            args = ("--manifest", manifest, "--folder", folder)
        found.append(Folder(host.name, folder, root, args))
    return found


def command(f: Folder) -> str:
    argv = ["python3", "-", "verify", "--root", f.root, *f.args, "--full",
            "--cache", f"{CACHE_DIR}/{f.folder}.json"]
    return f"mkdir -p -m 0700 {shlex.quote(CACHE_DIR)} && " + shlex.join(argv)


def verify(inv: Inventory, only: list[str] | None = None) -> list[Checked]:
    """Every folder on every host (or those named), all hosts at once; a host with several
    folders checks them one after another (each uses every core)."""
    on_hosts = revisions.host_revisions(inv.deployment)
    hosts = [h for h in inv.hosts if h.name in on_hosts and (not only or h.name in only)]
    if not hosts:
        raise InstallerError(
            f"no host of {inv.deployment} runs a revision this state knows"
            + (f" among {', '.join(only)}" if only else ""),
            ["run `installer up` first, or name hosts of this deployment with --host"],
        )
    script = VERIFIER.read_bytes()

    def one(host: Host) -> list[Checked]:
        rev = revisions.get(inv.deployment, on_hosts[host.name])
        found = []
        for f in folders(rev.inventory(), host, rev.bundle_id):
            r = remote.run_one(target(inv, host), command(f), stdin=script, timeout=TIMEOUT_S)
            try:
                out = json.loads(r.text)
            except ValueError:
                out = {"ok": False, "problems": [r.why]}
            found.append(Checked(
                f, r.ok and bool(out.get("ok")), list(out.get("problems", [])),
                int(out.get("hashed_files", 0)), int(out.get("hashed_bytes", 0)), float(out.get("seconds", 0.0)),
            ))
        return found

    return [c for per_host in remote.each(hosts, one) for c in per_host]
