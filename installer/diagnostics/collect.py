"""`installer doctor --collect`: one tar.gz a user can attach to a support ticket.

Every host at once over SSH (installer/hosts/ssh.py's strict host keys, as `installer doctor`):
host_collect.py is copied to the host, run as root, and sends back its files as a tar stream.
Then the deployment's `installer status` report and its Prometheus series of the last hour.
Every file is scanned for secrets (redact.py) before the archive is written (archive.py).

Nothing that fails stops the collect: an unreachable host, a stopped engine, a host with no
GPU or no Prometheus each become lines of MISSING.txt saying what and why.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from installer.base.errors import InstallerError
from installer.base.paths import state_dir
from installer.diagnostics import archive, host_collect, prometheus_range, redact
from installer.hosts import remote
from installer.hosts.ssh import Target, target
from installer.inventory import Inventory
from installer.inventory.topology import HOST_LAYOUT
from installer.secrets import keys, secret_files
from installer.status.report import prometheus_url
from installer.status.report import report as status_report

HOST_SCRIPT = Path(host_collect.__file__)
HOST_TIMEOUT_S = 300.0
DEFAULT_JOURNAL_LINES = 500


@dataclass(frozen=True)
class HostRow:
    host: str
    collected: int
    missing: int
    redactions: int


@dataclass(frozen=True)
class Collection:
    path: Path
    rows: list[HostRow]  # one per host, then "(deployment)" for status and Prometheus
    redactions: list[dict[str, object]]  # archive path and rule of each, never the value
    missing: list[str]  # "host: item: why"


def host_args(inv: Inventory, host_name: str, journal_lines: int) -> list[str]:
    """host_collect.py's command line for this host: the on-host layout, and the files its
    roles must have written (their absence is reported)."""
    cfg, var = HOST_LAYOUT["pli_config_dir"], HOST_LAYOUT["pli_state_dir"]
    host = next(h for h in inv.hosts if h.name == host_name)
    groups = inv.host_groups(host)
    expected = [f"{cfg}/engine.env", f"{cfg}/gateway.yml", f"{var}/release.json"] if "serving" in groups else []
    expected += ["/etc/prometheus/prometheus.yml"] if "monitoring" in groups else []
    args = ["--journal-lines", str(journal_lines), "--config-dir", cfg, "--state-dir", var,
            "--root", HOST_LAYOUT["pli_root"]]
    for path in expected:
        args += ["--expect", path]
    return args


def run_on_host(t: Target, args: list[str], timeout: float = HOST_TIMEOUT_S) -> archive.Part:
    """host_collect.py on the host (as root: sudo -n for another SSH user), its files read
    back; a host that gives none is one missing entry saying why.

    The script goes into a folder of its own (mktemp -d: 0700) and runs isolated (`python3 -I`),
    as installer/flows/gpu_checks.py does: Python puts a script's folder first on the import path and
    reads PYTHON* variables, so a `json.py` another user left in /tmp would otherwise run as root."""
    command = (
        'd=$(mktemp -d) && cat > "$d/collect.py" && '
        f'python3 -I "$d/collect.py" {shlex.join(args)}; rc=$?; rm -rf "$d"; exit $rc'
    )
    part = archive.Part(t.name)
    r = remote.run_one(t, command, stdin=HOST_SCRIPT.read_bytes(), timeout=timeout)
    if r.rc == remote.NO_ANSWER and not r.stdout:
        part.missing["(all)"] = f"no answer over SSH within {timeout:.0f} s: nothing collected from this host"
        return part
    try:
        with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r:gz") as tar:
            for member in tar.getmembers():
                data = tar.extractfile(member)
                if data is not None:
                    part.files[member.name] = data.read()
    except (tarfile.TarError, EOFError, OSError):
        err = (r.stderr.splitlines() or ["no output"])[-1]
        part.files.clear()
        part.missing["(all)"] = f"ssh rc {r.rc}: {err[:300]}: nothing collected from this host"
        return part
    status = json.loads(part.files.pop("_collect.json", b"{}") or b"{}")
    part.missing.update(status.get("missing", {}))
    part.excluded = status.get("excluded", [])
    return part


def known_secrets(inv: Inventory) -> dict[str, str]:
    """The deployment's secrets this machine holds (its files, and the inventory's webhook URL,
    whose path is a Slack or pager credential): any copy of one is cut, as itself, URL-encoded
    or escaped in JSON (redact.forms)."""
    found = {}
    for name, path in (("redis-password", secret_files.redis_password_file(inv.deployment)),
                       ("metrics-token", secret_files.metrics_token_file(inv.deployment)),
                       ("ray-token", secret_files.ray_token_file(inv.deployment)),
                       ("probe-key", keys.probe_secret_path())):
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if len(value) >= 8:
            found[name] = value
    if inv.monitoring.webhook_url:
        found["webhook-url"] = inv.monitoring.webhook_url
    return found


def redact_notes(parts: list[archive.Part], known: dict[str, str]) -> list[redact.Hit]:
    """What MANIFEST.json and MISSING.txt quote (a host's stderr, an exception's text) cut like
    every file, in place; its hits as those two files'."""
    counts: Counter[str] = Counter()

    def cut(text: str) -> str:
        out, n = redact.redact(text, known)
        counts.update(n)
        return out

    for p in parts:
        p.missing = {cut(k): cut(v) for k, v in p.missing.items()}
        p.excluded = [{k: cut(v) for k, v in e.items()} for e in p.excluded]
    return [redact.Hit(f, rule, n) for f in ("MANIFEST.json", "MISSING.txt") for rule, n in sorted(counts.items())]


def deployment_part(inv: Inventory, parts: list[archive.Part], timeout_s: float, now: float) -> archive.Part:
    """status.json and prometheus.csv for the deployment, and each host's share of them."""
    part = archive.Part("")
    by_name = {p.name: p for p in parts}
    try:
        status = status_report(inv, None, timeout_s).to_json()
    except InstallerError as exc:
        part.missing["status.json"] = f"`installer status` failed: {exc}"
        for p in parts:
            p.missing["status.json"] = "see the deployment's status.json entry"
    else:
        part.files["status.json"] = (json.dumps(status, indent=1) + "\n").encode()
        for p in parts:
            rows = [r for r in status["rows"] if r["host"] == p.name]
            p.files["status.json"] = (json.dumps({**status, "rows": rows}, indent=1) + "\n").encode()
    url = prometheus_url(inv)
    if url is None:
        why = "no monitoring host in the inventory: no Prometheus to ask"
    else:
        try:
            exported = prometheus_range.export(url, timeout_s, end=now)
        except prometheus_range.PrometheusError as exc:
            why = str(exc)
        else:
            part.files["prometheus.csv"] = exported.csv().encode()
            for name in exported.no_data:
                part.missing[f"prometheus.csv:{name}"] = "no sample in the last hour (nothing exports it here)"
            for name, err in exported.errors.items():
                part.missing[f"prometheus.csv:{name}"] = err
            for name, p in by_name.items():
                p.files["prometheus.csv"] = exported.csv(name).encode()
            return part
    part.missing["prometheus.csv"] = why
    for p in parts:
        p.missing["prometheus.csv"] = why
    return part


def default_output(deployment: str, now: float) -> Path:
    return state_dir() / "support" / f"{archive.root_name(deployment, now)}.tar.gz"


def collect(
    inv: Inventory,
    journal_lines: int = DEFAULT_JOURNAL_LINES,
    output: Path | None = None,
    timeout_s: float = 10.0,
    progress: Callable[[str], None] = lambda _msg: None,
) -> Collection:
    """Collect every host of `inv` and the deployment's status and metrics into one redacted
    archive at `output` (a file, or a folder to put it in; default: the state folder's
    support/); never fails for what one host or service could not give."""
    if journal_lines < 1:
        raise InstallerError(f"--journal-lines must be at least 1, not {journal_lines}")
    now = time.time()
    progress(f"collecting from {len(inv.hosts)} host(s)")
    hosts = [target(inv, h) for h in inv.hosts]
    parts = remote.each(hosts, lambda t: run_on_host(t, host_args(inv, t.name, journal_lines)))
    progress("reading installer status and Prometheus")
    parts.append(deployment_part(inv, parts, timeout_s, now))
    progress("scanning for secrets")
    known = known_secrets(inv)
    for p in parts:
        p.files, p.hits = redact.scan(p.files, known)
    parts[-1].hits += redact_notes(parts, known)
    root = archive.root_name(inv.deployment, now)
    if output is None:
        path = default_output(inv.deployment, now)
    else:
        path = output / f"{root}.tar.gz" if output.is_dir() else output
    files = archive.layout(inv.deployment, now, parts)
    # and the two files themselves, as every file: what a rule still finds is cut and reported
    # (here and in the command's summary; the manifest was written before)
    notes, late = redact.scan({k: files[k] for k in ("MANIFEST.json", "MISSING.txt")}, known)
    files.update(notes)
    archive.write(path, root, files, now)
    rows = [HostRow(p.name or "(deployment)", len(p.files), len(p.missing), sum(h.count for h in p.hits))
            for p in parts]
    redactions = archive.manifest(inv.deployment, now, parts)["redactions"] + [h.to_json() for h in late]
    missing = [f"{p.name or 'deployment'}: {k}: {v}" for p in parts for k, v in sorted(p.missing.items())]
    return Collection(path, rows, redactions, missing)
