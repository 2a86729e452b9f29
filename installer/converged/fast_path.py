"""The verified fast path of a converged `installer up`.

After a full configure that left a host serving, `record()` runs installer/converged/probe.py on
it (one SSH call) and keeps what it found: the sha256, mode and owner of every file the roles
manage, the release `current` link, each release tree, the managed units' states, the packages
and the service user, next to the digests of everything Ansible was given (the rendered
variables, the playbooks, the bundle, the key set, the certificate and secret files the roles
copy). The next `up` compares: the same inputs, and every host's probe (again one SSH call per
host, all at once) equal to its record, means Ansible would change nothing and is skipped; any
difference, a missing record, or `--full` runs Ansible and says why. What a probe cannot see is
not trusted: the proof request still runs through every gateway.

The record lives in the state folder (`converged/<deployment>.json`, 0600): it names key-file
hashes and secret files' digests, never a secret.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from installer.ansible.runner import HostResult, PlaybookResult
from installer.base.files import write_private
from installer.base.paths import state_dir
from installer.bundle.manifest import Manifest
from installer.bundle.push import HOST_BUNDLES
from installer.converged import probe as converged_probe
from installer.hosts import remote
from installer.hosts.ssh import Target
from installer.inventory.topology import HOST_LAYOUT

PROBE_SCRIPT = Path(converged_probe.__file__)
PROBE_TIMEOUT_S = 300.0
_ROOT, _CONFIG, _STATE = HOST_LAYOUT["pli_root"], HOST_LAYOUT["pli_config_dir"], HOST_LAYOUT["pli_state_dir"]

# What the roles write (playbooks/roles/*): hashed file by file, with mode and owner.
MANAGED_TREES = (
    _CONFIG,  # engine.env, gateway.yml, keys.json, metrics.token, tls/, drain.json
    f"{_STATE}/apt/preferences.d",  # (its lists and caches are apt's own, rewritten by apt)
    f"{_STATE}/apt-gpu/preferences.d",  # the driver branch's pin (nvidia_driver role)
    "/etc/prometheus",
    "/var/lib/private-llm-dashboards",
    "/etc/grafana/provisioning",
    "/etc/systemd/system/private-llm-*.d",  # drop-ins change a unit as much as its file
)
MANAGED_FILES = (
    f"{_ROOT}/current",  # the release link: which environment the units run
    f"{_STATE}/release.json",
    f"{_STATE}/apt/sources.list",
    f"{_STATE}/apt-gpu/sources.list",
    "/etc/systemd/system/private-llm-*",
    "/etc/sysctl.d/90-private-llm.conf",
    "/etc/default/prometheus*",
    "/etc/redis/redis.conf",
    "/etc/modprobe.d/private-llm-*",
    "/etc/keepalived/keepalived.conf", "/etc/keepalived/pli_readyz_check.py",  # the frontend's VIP
)
# The weights, file by file by size, mtime, ctime, inode, mode and owner: hundreds of GB are too
# much to hash on every `up`; the model role verifies their checksums when it copies them.
STAT_FILE_TREES = (f"{_STATE}/models",)
# Releases (venvs) and tarball installs, by path, size, mode, owner, mtime and ctime (probe.py).
STAT_TREES = (f"{_ROOT}/releases/*", f"{_ROOT}/monitoring")
LISTINGS = (f"{_ROOT}/releases", HOST_BUNDLES)  # what the release role keeps, no more
UNIT_PATTERNS = ("private-llm-*",)
UNITS = (
    "redis-server.service", "prometheus.service", "prometheus-alertmanager.service",
    "prometheus-node-exporter.service", "nvidia-persistenced.service",
    "nvidia-fabricmanager.service", "nvidia-dcgm-exporter.service", "keepalived.service",
)
USERS = (HOST_LAYOUT["pli_user"],)
# The GPU roles' packages (driver of whichever branch, CUDA, NCCL, fabric manager, DCGM) by
# dpkg pattern: their names follow the branch the host chose, which the control side never sees.
PACKAGE_PATTERNS = (
    "nvidia-*", "libnvidia-*", "cuda-*", "libcublas*", "libnccl*", "datacenter-gpu-manager*",
)


def spec(packages: Iterable[str]) -> dict[str, Any]:
    """What the probe describes on one host; `packages`: the OS packages its roles install."""
    return {
        "trees": list(MANAGED_TREES), "files": list(MANAGED_FILES), "stat_trees": list(STAT_TREES),
        "stat_file_trees": list(STAT_FILE_TREES),
        "listings": list(LISTINGS), "unit_patterns": list(UNIT_PATTERNS), "units": list(UNITS),
        "packages": sorted(set(packages)), "package_patterns": list(PACKAGE_PATTERNS),
        "users": list(USERS),
    }


# --- what Ansible was given -------------------------------------------------------------------

_SOURCE_KEYS = (
    "tls_ca_src", "tls_cert_src", "tls_key_src", "pli_metrics_token_src", "redis_password_file",
    "gateway_jwks_ca_src",  # auth.jwt.jwks_ca: a renewed IdP CA is a change to configure
    "engine_ray_token_src",  # a model spanning hosts: its Ray cluster's token
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f"{path.relative_to(root)}\0".encode())
        h.update(_sha(path.read_bytes()).encode())
    return h.hexdigest()


def inputs(inv_dir: Path, man: Manifest, playbooks_dir: Path) -> dict[str, dict[str, str]]:
    """Per host, the digest of each thing a configure run depends on, named for the summary. The
    gateways' keys are named apart from the other variables, though rendered among them."""
    hosts_text = (inv_dir / "hosts.yml").read_text()
    all_text = (inv_dir / "group_vars" / "all.yml").read_text()
    hosts = yaml.safe_load(hosts_text)["all"]["hosts"]
    group = yaml.safe_load(all_text) or {}
    common = {
        "bundle": man.bundle_id,
        "release": man.release_id,
        "variables": _sha(all_text.encode()),
        "playbooks": tree_digest(playbooks_dir),
        "keys": _sha(str(group.get("gateway_keys_json", "")).encode()),
        "probe": _sha(PROBE_SCRIPT.read_bytes()),
    }
    found = {}
    for name, hv in hosts.items():
        sources = []
        for key in _SOURCE_KEYS:
            src = (hv or {}).get(key) or group.get(key)
            if src:
                p = Path(src)
                sources.append(f"{key}={_sha(p.read_bytes()) if p.is_file() else 'absent'}")
        found[name] = {
            **common,
            "host variables": _sha(json.dumps(hv, sort_keys=True, default=str).encode()),
            "files the roles copy": _sha("\n".join(sources).encode()),
        }
    return found


def host_packages(inv_dir: Path) -> dict[str, list[str]]:
    """The OS packages each host's roles install, read from the rendered hosts.yml."""
    hosts = yaml.safe_load((inv_dir / "hosts.yml").read_text())["all"]["hosts"]
    return {n: [p["name"] for p in (hv or {}).get("common_packages") or []] for n, hv in hosts.items()}


# --- the probe over SSH -----------------------------------------------------------------------

def probe_command(host_spec: dict[str, Any]) -> str:
    """The probe (read from stdin), run as root (installer/hosts/remote.py): it reads the 0600 key files."""
    return shlex.join(["python3", "-", json.dumps(host_spec, sort_keys=True)])


@dataclass
class Probe:
    host: str
    entries: dict[str, str] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


def probe_host(t: Target, host_spec: dict[str, Any], timeout: float = PROBE_TIMEOUT_S) -> Probe:
    r = remote.run_one(t, probe_command(host_spec), stdin=PROBE_SCRIPT.read_bytes(), timeout=timeout)
    if r.rc == remote.NO_ANSWER and not r.stdout:
        return Probe(t.name, error=r.stderr, seconds=r.seconds)
    lines = r.text.strip().splitlines()
    if not r.ok or not lines or not lines[-1].startswith("{"):
        err = (r.stderr.splitlines() or ["no output"])[-1]
        return Probe(t.name, error=f"probe failed (ssh rc {r.rc}): {err}", seconds=r.seconds)
    return Probe(t.name, json.loads(lines[-1])["entries"], seconds=r.seconds)


def probe_hosts(hosts: list[Target], specs: Mapping[str, dict[str, Any]]) -> dict[str, Probe]:
    return {p.host: p for p in remote.each(hosts, lambda t: probe_host(t, specs[t.name]))}


# --- comparison (pure) ------------------------------------------------------------------------

def _what(key: str) -> tuple[str, str]:
    kind, _, name = key.partition(":")
    return kind, name


def _field(desc: str, name: str) -> str:
    return next((w.split("=", 1)[1] for w in desc.split() if w.startswith(f"{name}=")), "")


def describe_drift(key: str, recorded: str | None, found: str | None) -> str:
    """One difference in words: which file or unit, and what about it changed."""
    kind, name = _what(key)
    if recorded is None:
        return f"{name}: new ({kind}), not there after the last full configure"
    if found is None or found == "absent":
        return f"{name}: missing ({kind})"
    if recorded == "absent":
        return f"{name}: appeared ({kind})"
    if kind == "file":
        parts = []
        for f in ("sha256", "mode", "owner"):
            if _field(recorded, f) != _field(found, f):
                parts.append("content changed" if f == "sha256" else f"{f} {_field(recorded, f)} -> {_field(found, f)}")
        if recorded.startswith("link") or found.startswith("link"):
            parts = [f"{recorded} became {found}"]
        return f"{name}: {', '.join(parts) or f'{recorded} became {found}'}"
    if kind == "stat":
        parts = [
            f"{f} {_field(recorded, f)} -> {_field(found, f)}"
            for f in ("size", "mtime", "ctime", "inode", "mode", "owner") if _field(recorded, f) != _field(found, f)
        ]
        return f"{name}: {', '.join(parts) or f'{recorded} became {found}'}"
    if kind == "unit":
        parts = [
            f"{f} {_field(recorded, f)} -> {_field(found, f)}"
            for f in ("ActiveState", "SubState", "UnitFileState", "NeedDaemonReload", "FragmentPath", "DropInPaths")
            if _field(recorded, f) != _field(found, f)
        ]
        return f"{name} (unit): {', '.join(parts)}"
    if kind == "tree":
        return f"{name}: files changed under it ({recorded.split(',')[0]} then, {found.split(',')[0]} now)"
    return f"{name} ({kind}): {recorded!r} became {found!r}"


def compare(recorded: Mapping[str, str], found: Mapping[str, str]) -> list[str]:
    """Every difference between a host's record and its probe now, in words, sorted by key."""
    keys = sorted(set(recorded) | set(found))
    return [
        describe_drift(k, recorded.get(k), found.get(k))
        for k in keys if recorded.get(k) != found.get(k)
    ]


# A unit the roles left running is active; an enabled one must run; one a role stopped (Debian's
# monitoring services beside a tarball install) is inactive and disabled. Anything else -- failed,
# restarting, enabled but dead -- is not what Ansible meant, whatever the record says.
_RUNS = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated")


def unit_faults(entries: Mapping[str, str]) -> list[str]:
    """The managed units not in their intended state, in words: never recorded, never trusted."""
    faults = []
    for key, desc in sorted(entries.items()):
        kind, name = _what(key)
        if kind != "unit":
            continue
        active, enabled = _field(desc, "ActiveState"), _field(desc, "UnitFileState")
        ours = name.startswith(UNIT_PATTERNS[0].rstrip("*"))
        if active == "active" or (active == "inactive" and not ours and enabled not in _RUNS):
            continue
        sub = _field(desc, "SubState")
        faults.append(f"{name} (unit): {active}/{sub}, {enabled or 'no unit file'}, should be running")
    return faults


def compare_inputs(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """Which of Ansible's inputs changed since the host's record, by name."""
    return [k for k in sorted(set(recorded) | set(now)) if recorded.get(k) != now.get(k)]


def gpu_reasons(results: Iterable[Mapping[str, Any]]) -> list[str]:
    """The GPU hosts whose doctor checks failed on the fast path, with what failed: their `up`
    runs Ansible in full, where gpu_verify gates them with its GEMM and all-reduce too."""
    return [
        f"{r['host']}: GPU checks failed: "
        + (r.get("error") or "; ".join(f"{c['name']}: {c['detail']}" for c in r.get("checks", [])
                                       if c.get("status") == "fail"))
        for r in results if r.get("status") == "fail"
    ]


def fast_result(hosts: list[Target], inv_dir: Path, gpu: Mapping[str, dict[str, Any]]) -> PlaybookResult:
    """What the skipped configure stands for: every host ok, nothing changed, and on GPU hosts
    the doctor's result where gpu_verify's would be, so `up` keeps its gpu column."""
    return PlaybookResult(
        "skipped (fast path)", 0,
        {t.name: HostResult(t.name, ok=1, facts={"gpu_verify": gpu[t.name]} if t.name in gpu else {})
         for t in hosts},
        inv_dir,
    )


# --- the record -------------------------------------------------------------------------------

def record_file(deployment: str) -> Path:
    return state_dir() / "converged" / f"{deployment}.json"


def load(deployment: str) -> dict[str, Any]:
    path = record_file(deployment)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("hosts", {}) if isinstance(data, dict) else {}


def save(deployment: str, hosts: Mapping[str, Any]) -> None:
    write_private(record_file(deployment), json.dumps({"hosts": dict(hosts)}, indent=1, sort_keys=True) + "\n")


def forget(deployment: str) -> None:
    """Before a full configure: a run that stops halfway must not leave a record that trusts it."""
    record_file(deployment).unlink(missing_ok=True)


@dataclass
class Verdict:
    """Whether this `up` may skip Ansible: `reasons` says, host by host, why it may not."""

    fast: bool
    reasons: list[str] = field(default_factory=list)
    probes: dict[str, Probe] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "fast": self.fast, "reasons": self.reasons,
            "probe_seconds": {h: p.seconds for h, p in self.probes.items()},
        }


MAX_REASONS_PER_HOST = 5


def judge(
    hosts: list[Target],
    now_inputs: Mapping[str, Mapping[str, str]],
    records: Mapping[str, Any],
    probe: Any,
) -> Verdict:
    """Compare the record with Ansible's inputs now and, only if they match, with each host's
    probe (`probe(targets_to_probe) -> {host: Probe}`)."""
    reasons: list[str] = []
    for t in hosts:
        rec = records.get(t.name)
        if not rec:
            reasons.append(f"{t.name}: no record of a full configure with this state")
            continue
        changed = compare_inputs(rec.get("inputs", {}), now_inputs.get(t.name, {}))
        if changed:
            reasons.append(f"{t.name}: changed since its last full configure: {', '.join(changed)}")
    if reasons:
        return Verdict(False, reasons)
    probes: dict[str, Probe] = probe(hosts)
    for t in hosts:
        pr = probes[t.name]
        if pr.error:
            reasons.append(f"{t.name}: {pr.error}")
            continue
        drift = unit_faults(pr.entries) + compare(records[t.name].get("entries", {}), pr.entries)
        more = f" (and {len(drift) - MAX_REASONS_PER_HOST} more)" if len(drift) > MAX_REASONS_PER_HOST else ""
        reasons += [f"{t.name}: {d}" for d in drift[:MAX_REASONS_PER_HOST]]
        if more:
            reasons[-1] += more
    return Verdict(not reasons, reasons, probes)


# --- what `up` calls --------------------------------------------------------------------------

def verify(
    hosts: list[Target], inv_dir: Path, man: Manifest, playbooks_dir: Path, deployment: str, *,
    full: bool = False,
) -> Verdict:
    """May this `up` skip Ansible? Only when every host's record matches, inputs and probe."""
    if full:
        return Verdict(False, ["--full: every host configured by Ansible"])
    packages = host_packages(inv_dir)
    specs = {t.name: spec(packages.get(t.name, [])) for t in hosts}
    return judge(
        hosts, inputs(inv_dir, man, playbooks_dir), load(deployment),
        lambda ts: probe_hosts(ts, specs),
    )


def record(
    hosts: list[Target], inv_dir: Path, man: Manifest, playbooks_dir: Path, deployment: str,
) -> list[str]:
    """After a full configure: probe the hosts that serve now and keep what they hold. Returns
    one line per host that could not be recorded (its next `up` runs Ansible in full)."""
    packages = host_packages(inv_dir)
    specs = {t.name: spec(packages.get(t.name, [])) for t in hosts}
    now = inputs(inv_dir, man, playbooks_dir)
    probes = probe_hosts(hosts, specs)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kept, lines = keep(probes, now, at)
    save(deployment, kept)
    return lines


def keep(
    probes: Mapping[str, Probe], now: Mapping[str, Mapping[str, str]], at: str
) -> tuple[dict[str, Any], list[str]]:
    """The records of the hosts whose probe answered with every unit as intended, and one line
    per host left out: a unit that crashed after Ansible started it must not become the norm."""
    kept: dict[str, Any] = {}
    lines = []
    for h, p in probes.items():
        faults = [p.error] if p.error else unit_faults(p.entries)
        if faults:
            lines.append(f"{h}: not recorded: {'; '.join(faults)}")
        else:
            kept[h] = {"inputs": dict(now[h]), "entries": p.entries, "at": at}
    return kept, lines
