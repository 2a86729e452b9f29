#!/usr/bin/env python3
"""GPU facts and health checks on one host, as JSON.

This file runs on the hosts themselves: the GPU roles ship it with ansible.builtin.script
(their files/gpu_doctor.py is a link to it) and `installer doctor` copies it over SSH. So it
uses the standard library only (Python 3.9+, what Debian 12 and Ubuntu 22.04 ship) and finds
torch, for the GEMM and all-reduce checks, in whichever interpreter has it.

    python3 doctor.py facts                  what is there: GPUs, driver, NUMA, NVSwitch
    python3 doctor.py check [--no-gemm] ...  facts + nvidia-smi health, XIDs, GEMM, all-reduce
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

NVIDIA_VENDOR = "0x10de"

# nvidia-smi --query-gpu fields, in this order (nvidia-smi --help-query-gpu); the first eight
# exist on every driver we support, the rest are dropped if a driver rejects them.
SMI_FIELDS = [
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "persistence_mode",
    "compute_cap",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "mig.mode.current",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "pstate",
    "pcie.link.gen.max",
    "pcie.link.width.max",
]
SMI_BASE_FIELDS = 8

# PCI device ID ranges -> generation, for hosts with no driver yet (no nvidia-smi). Ranges
# follow NVIDIA's chip families in the PCI ID database (pci-ids.ucw.cz, vendor 10de), e.g.
# V100 1db1/1db5, T4 1eb8, A100 20b0/20b2, A10 2236, H100 2330, H200 2335, L40S 26b9,
# L4 27b8, B200 2901. With a driver loaded, the compute capability decides instead.
PCI_GENERATIONS = [
    (0x15F0, 0x15FF, "pascal"),  # GP100 (P100), inside the Maxwell range below: first wins
    (0x0FC0, 0x12BF, "kepler"),
    (0x1340, 0x17FF, "maxwell"),  # GM107/108, GM204/206, GM200
    (0x1B00, 0x1D7F, "pascal"),  # GP102/104/106/107/108
    (0x1D80, 0x1DFF, "volta"),  # GV100 (V100, Titan V)
    (0x1E00, 0x1FFF, "turing"),  # TU102/104/106/117
    (0x2080, 0x20FF, "ampere"),  # GA100 (A100, A30, A800)
    (0x2180, 0x21FF, "turing"),  # TU116
    (0x2200, 0x22FF, "ampere"),  # GA102
    (0x2300, 0x23FF, "hopper"),  # GH100 (H100, H800, H20, H200, GH200)
    (0x2400, 0x25FF, "ampere"),  # GA103/104/106/107
    (0x2600, 0x28FF, "ada"),  # AD102/103/104/106/107
    (0x2900, 0x2FFF, "blackwell"),  # GB100/102, GB202..207
]

# XIDs that mean the hardware or its memory is in trouble (NVIDIA "XID Errors" catalogue):
# 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fell off the bus, 92 high single-bit
# ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP errors. Others (13, 31, 43, ...) are
# usually an application's fault and only warn.
CRITICAL_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)")
_NA = {"", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]"}


def _run(argv: list[str], timeout: float = 30) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return p.returncode, p.stdout, p.stderr


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# ---------------------------------------------------------------- parsing (unit-tested)


def parse_proc_version(text: str) -> dict[str, str]:
    """/proc/driver/nvidia/version -> {version, kernel_modules}."""
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    if not m:
        return {"version": "", "kernel_modules": ""}
    flavor = "open" if "Open Kernel Module" in text else "proprietary"
    return {"version": m[1], "kernel_modules": flavor}


def _value(raw: str) -> Any:
    raw = raw.strip()
    if raw in _NA:
        return None
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return raw


def parse_smi_csv(text: str, fields: list[str]) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=... --format=csv,noheader,nounits` -> one dict per GPU."""
    gpus = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        # names never hold commas in practice; if one did, re-join the surplus into the name
        if len(cols) > len(fields):
            extra = len(cols) - len(fields)
            cols = [cols[0], ", ".join(cols[1 : 2 + extra]), *cols[2 + extra :]]
        # zip(strict=) needs Python 3.10; hosts may run 3.9
        row = {f: _value(c) for f, c in zip(fields, cols)}  # noqa: B905
        for key in ("name", "uuid", "pci.bus_id", "driver_version", "compute_cap", "pstate"):
            if row.get(key) is not None:
                row[key] = str(row[key])
        gpus.append(row)
    return gpus


def parse_smi_q(text: str) -> dict[str, Any]:
    """`nvidia-smi -q`: the CUDA version the driver supports and each GPU's NVLink fabric state."""
    cuda = re.search(r"CUDA Version\s*:\s*([\d.]+)", text)
    driver = re.search(r"Driver Version\s*:\s*([\d.]+)", text)
    fabric = []
    for block in re.split(r"\n(?=\s*Fabric\s*\n)", text)[1:]:
        state = re.search(r"State\s*:\s*(.+)", block)
        fabric.append(state[1].strip() if state else "")
    return {
        "cuda_version": cuda[1] if cuda else "",
        "driver_version": driver[1] if driver else "",
        "fabric_states": fabric,
    }


def parse_xids(text: str) -> list[dict[str, Any]]:
    """Kernel log lines -> [{bus_id, xid, critical, message}] for every NVRM Xid line."""
    found = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            xid = int(m[2])
            found.append(
                {
                    "bus_id": m[1],
                    "xid": xid,
                    "critical": xid in CRITICAL_XIDS,
                    "message": m[3].strip()[:200],
                }
            )
    return found


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return cpus


def generation_from_pci(device_id: int) -> str:
    for lo, hi, gen in PCI_GENERATIONS:
        if lo <= device_id <= hi:
            return gen
    return ""


def generation_from_cc(cc: str) -> str:
    m = re.fullmatch(r"(\d+)\.(\d+)", cc or "")
    if not m:
        return ""
    major, minor = int(m[1]), int(m[2])
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada" if minor == 9 else "ampere"
    return {
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        11: "blackwell",
        12: "blackwell",
    }.get(major, "")


# ---------------------------------------------------------------- topology (unit-tested)

# `nvidia-smi topo -m` link kinds, best first (its legend): NV# a bonded set of # NVLinks
# (directly or through NVSwitches), PIX at most one PCIe bridge, PXB several PCIe bridges,
# PHB through the CPU's PCIe host bridge, NODE between host bridges of one NUMA node, SYS across
# the inter-socket link (QPI/UPI/xGMI); SOC is older drivers' name for SYS.
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def link_rank(link: str) -> int:
    """0 for NVLink (more links rank better: -#), then PIX..SYS as 1..5; unknown ranks last."""
    link = link.strip().upper()
    if link.startswith("NV") and link[2:].isdigit():
        return -int(link[2:])
    if link == "SOC":
        link = "SYS"
    return LINK_ORDER.index(link) if link in LINK_ORDER else len(LINK_ORDER)


def parse_topo(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m` -> {gpus: [{index, cpu_affinity, numa_affinity}], links: {"i,j": kind}}.

    The matrix is tab-separated (older drivers pad with spaces); a header row names the GPU/NIC
    columns and then "CPU Affinity", "NUMA Affinity" and, on newer drivers, "GPU NUMA ID".
    NIC rows and columns are skipped: the engines only care how GPUs reach each other.
    """
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]

    def cells(line: str) -> list[str]:
        return [c.strip() for c in (line.split("\t") if "\t" in line else re.split(r"\s{2,}", line))]

    header: list[str] = []
    gpus: list[dict[str, Any]] = []
    links: dict[str, str] = {}
    for line in lines:
        row = cells(line)
        if not header:
            if any(re.fullmatch(r"GPU\d+", c) for c in row[:3]):
                header = row if row and row[0] == "" else ["", *row]
            continue
        if not row or not re.fullmatch(r"GPU\d+", row[0]):
            if row and row[0].startswith("Legend"):
                break
            continue
        i = int(row[0][3:])
        col = dict(zip(header[1:], row[1:]))  # noqa: B905 (Python 3.9 on hosts)
        for name, value in col.items():
            m = re.fullmatch(r"GPU(\d+)", name)
            if m and int(m[1]) != i:
                links[f"{i},{int(m[1])}"] = value.upper()
        numa = col.get("NUMA Affinity", "")
        gpus.append(
            {
                "index": i,
                "cpu_affinity": col.get("CPU Affinity", ""),
                "numa_affinity": int(numa) if numa.isdigit() else -1,
            }
        )
    return {"gpus": gpus, "links": links}


def interconnect(topology: dict[str, Any]) -> str:
    """The worst link between any two GPUs ("NV18", "PIX", ..., "SYS"), "" with fewer than two."""
    links = list((topology or {}).get("links", {}).values())
    return max(links, key=link_rank) if links else ""


# Expected nccl-tests-style all-reduce bus bandwidth (GB/s) for the worst link between the GPUs.
# NVLink: line rate per link and direction, 25 GB/s for NVLink 2/3/4 (V100, A100, H100/H200:
# 18 links x 25 = 450 GB/s one way, NVIDIA's "900 GB/s" counts both directions) and 50 GB/s for
# NVLink 5 (B200). NCCL's protocol overhead is about 20%, so a ring all-reduce reaches about
# 370 GB/s busbw on H100/H200 NVLink (NCCL maintainer, NVIDIA/nccl-tests issue #212); only
# NVLink SHARP (NVLS, multicast) reaches ~480, and it is off here (never on shared hosts).
# A100 NV12 pairs measure 208-240 (NVIDIA/nccl-tests #178; 8x A100 SXM 230-250).
# PCIe: x16 line rate per direction ~32 GB/s (Gen4), ~64 (Gen5); NCCL's P2P over one switch or
# host bridge gets ~0.6-0.8 of it (8x H100 PCIe: 35-45 GB/s busbw). Across sockets (SYS) NCCL
# stages through host memory by default: ~10-25 GB/s.
NVLINK_GBPS_PER_LINK = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}
PCIE_GBPS_X16 = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


def expected_busbw(link: str, generation: str, pcie_gen: int = 0, pcie_width: int = 16) -> dict[str, Any]:
    """{link, low, high, basis} for an all-reduce whose slowest hop is `link`; low/high GB/s."""
    link = (link or "").upper()
    if link.startswith("NV") and link[2:].isdigit():
        per = NVLINK_GBPS_PER_LINK.get(generation, 25.0)
        line = int(link[2:]) * per
        return {
            "link": link,
            "low": round(0.75 * line),
            "high": round(0.85 * line),
            "basis": f"{link[2:]} NVLinks x {per:.0f} GB/s = {line:.0f} GB/s one way; NCCL ring "
            "all-reduce reaches ~80% of it (no NVLink SHARP)",
        }
    line = PCIE_GBPS_X16.get(pcie_gen, 32.0) * max(1, pcie_width or 16) / 16
    gen = f"PCIe Gen{pcie_gen} x{pcie_width or 16}" if pcie_gen else "PCIe (generation unknown: Gen4 x16 assumed)"
    if link in ("PIX", "PXB", "PHB", "NODE"):
        return {
            "link": link,
            "low": round(0.6 * line),
            "high": round(0.8 * line),
            "basis": f"{gen}: {line:.0f} GB/s one way; NCCL P2P over PCIe reaches 60-80% of it",
        }
    if link in ("SYS", "SOC"):
        return {
            "link": "SYS",
            "low": 10,
            "high": round(min(25.0, 0.4 * line)),
            "basis": f"{gen} across CPU sockets: NCCL stages through host memory (~10-25 GB/s)",
        }
    return {"link": link, "low": 0, "high": 0, "basis": "no GPU-to-GPU link to measure"}


def topology_facts(smi: str) -> dict[str, Any]:
    """`nvidia-smi topo -m` parsed, plus the raw matrix (for the record)."""
    rc, out, err = _run([smi, "topo", "-m"])
    if rc != 0:
        return {"gpus": [], "links": {}, "error": (err or out).strip()[:300]}
    return {**parse_topo(out), "raw": out}


# ---------------------------------------------------------------- facts


def pci_devices(root: str = "/sys/bus/pci/devices") -> list[dict[str, Any]]:
    devs = []
    for path in sorted(glob.glob(os.path.join(root, "*"))):
        if _read(os.path.join(path, "vendor")).strip() != NVIDIA_VENDOR:
            continue
        cls = _read(os.path.join(path, "class")).strip()
        dev_id = int(_read(os.path.join(path, "device")).strip() or "0", 16)
        numa = _read(os.path.join(path, "numa_node")).strip()
        kind = (
            "gpu"
            if cls.startswith(("0x0300", "0x0302"))
            else "nvswitch"
            if cls.startswith("0x0680")
            else "other"
        )
        devs.append(
            {
                "bus_id": os.path.basename(path),
                "device_id": f"{dev_id:04x}",
                "kind": kind,
                "generation": generation_from_pci(dev_id) if kind == "gpu" else "",
                "numa_node": int(numa) if numa.lstrip("-").isdigit() else -1,
                "local_cpulist": _read(os.path.join(path, "local_cpulist")).strip(),
            }
        )
    return devs


def numa_nodes(root: str = "/sys/devices/system/node") -> dict[str, str]:
    nodes = {}
    for path in sorted(glob.glob(os.path.join(root, "node[0-9]*"))):
        nodes[os.path.basename(path)[4:]] = _read(os.path.join(path, "cpulist")).strip()
    return nodes


def smi_query(smi: str) -> tuple[list[dict[str, Any]], str]:
    fields = list(SMI_FIELDS)
    while True:
        rc, out, err = _run(
            [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        )
        if rc == 0:
            return parse_smi_csv(out, fields), out
        if len(fields) == SMI_BASE_FIELDS:
            return [], (err or out).strip()
        fields = fields[:SMI_BASE_FIELDS]  # an older driver rejected a field: ask the basics


def facts() -> dict[str, Any]:
    devs = pci_devices()
    proc = parse_proc_version(_read("/proc/driver/nvidia/version"))
    smi = shutil.which("nvidia-smi") or ""
    gpus: list[dict[str, Any]] = []
    smi_error = ""
    q: dict[str, Any] = {"cuda_version": "", "driver_version": "", "fabric_states": []}
    if smi:
        gpus, raw = smi_query(smi)
        if not gpus:
            smi_error = raw
        rc, out, _ = _run([smi, "-q"])
        if rc == 0:
            q = parse_smi_q(out)
    by_bus = {d["bus_id"].lower(): d for d in devs}
    for g in gpus:
        bus = str(g.get("pci.bus_id") or "").lower()
        # nvidia-smi prints 00000000:3B:00.0; sysfs says 0000:3b:00.0
        pci = by_bus.get(bus[4:]) if len(bus) > 12 else by_bus.get(bus)
        g["generation"] = generation_from_cc(str(g.get("compute_cap") or "")) or (pci or {}).get(
            "generation", ""
        )
        g["numa_node"] = (pci or {}).get("numa_node", -1)
        g["local_cpulist"] = (pci or {}).get("local_cpulist", "")
    topology: dict[str, Any] = {"gpus": [], "links": {}}
    if smi and gpus:
        topology = topology_facts(smi)
        by_index = {t["index"]: t for t in topology["gpus"]}
        for g in gpus:
            t = by_index.get(g.get("index"), {})
            if g["numa_node"] < 0 and t.get("numa_affinity", -1) >= 0:
                g["numa_node"] = t["numa_affinity"]
            if not g["local_cpulist"] and t.get("cpu_affinity", "") not in ("", "N/A"):
                g["local_cpulist"] = t["cpu_affinity"]
    topology["interconnect"] = interconnect(topology)
    pci_gpus = [d for d in devs if d["kind"] == "gpu"]
    gens = {g["generation"] for g in (gpus or pci_gpus)}
    _, modinfo, _ = (
        _run(["modinfo", "-F", "version", "nvidia"]) if shutil.which("modinfo") else (1, "", "")
    )
    return {
        "host": socket.gethostname(),
        "gpu_count": len(gpus) if gpus else len(pci_gpus),
        "generation": gens.pop() if len(gens) == 1 else ("mixed" if gens else ""),
        "gpus": gpus,
        "pci_gpus": pci_gpus,
        "nvswitch_count": sum(d["kind"] == "nvswitch" for d in devs)
        or len(glob.glob("/dev/nvidia-nvswitch[0-9]*")),
        "driver": {
            "loaded": os.path.isdir("/sys/module/nvidia") or bool(proc["version"]),
            "version": proc["version"]
            or q["driver_version"]
            or (str(gpus[0].get("driver_version")) if gpus else ""),
            "kernel_modules": proc["kernel_modules"],
            "module_on_disk": modinfo.strip(),
            "nvidia_smi": smi,
            "nvidia_smi_error": smi_error[:300],
        },
        "cuda_driver_version": q["cuda_version"],
        "fabric_states": q["fabric_states"],
        "nouveau_loaded": os.path.isdir("/sys/module/nouveau"),
        "numa_nodes": numa_nodes(),
        "topology": topology,
        "init": _read("/proc/1/comm").strip(),
    }


# Package tests only (tests/e2e/test_gpu_packages.py): lab hosts are containers with no GPU and
# no kernel module, so the package mechanics (repository, pin, hold, branch upgrade) could not
# run. These facts say there are GPUs, and take "the running driver" from the installed
# nvidia-driver-* package, as if its module had loaded. Never set on a real deployment.
_DRIVER_PACKAGE = re.compile(r"nvidia-driver-(\d+)(-server)?(-open)?$")


def installed_driver_package(status_file: str = "/var/lib/dpkg/status") -> tuple[str, str]:
    """(package, upstream version) of the installed nvidia-driver-NNN[-server][-open], or ("", "")."""
    for para in _read(status_file).split("\n\n"):
        fields = dict(
            (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in para.splitlines() if ln[:1] not in " \t")
        )
        # "install ok installed", or "hold ok installed" once the role has held it
        if _DRIVER_PACKAGE.match(fields.get("Package", "")) and fields.get("Status", "").endswith(" ok installed"):
            return fields["Package"], fields.get("Version", "").split(":")[-1].split("-")[0]
    return "", ""


def assumed_facts(spec: dict[str, Any]) -> dict[str, Any]:
    """facts() for a host without GPUs, from spec {count, generation, nvswitches, cuda_driver_version}."""
    f = facts()
    count, generation = int(spec["count"]), str(spec["generation"])
    package, version = installed_driver_package()
    pci = [
        {"bus_id": f"0000:{i:02x}:00.0", "kind": "gpu", "device_id": "assumed", "generation": generation,
         "numa_node": 0, "local_cpulist": ""}
        for i in range(count)
    ]
    f.update(
        assumed=True,
        gpu_count=count,
        generation=generation,
        pci_gpus=pci,
        nvswitch_count=int(spec.get("nvswitches", 0)),
        gpus=[
            {"index": i, "name": f"assumed {generation} GPU (package test)", "driver_version": version,
             "persistence_mode": "Enabled", "generation": generation, "numa_node": 0, "local_cpulist": ""}
            for i in range(count)
        ] if version else [],
        cuda_driver_version=str(spec.get("cuda_driver_version", "")) if version else "",
    )
    f["driver"].update(
        loaded=bool(version),
        version=version,
        kernel_modules="open" if package.endswith("-open") else ("proprietary" if package else ""),
        module_on_disk=version,
        package=package,
    )
    return f


# ---------------------------------------------------------------- checks


def _check(name: str, status: str, detail: str, **data: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail, **data}


def check_smi(f: dict[str, Any], max_temp_c: int = 85) -> list[dict[str, Any]]:
    """Driver, CUDA, ECC, persistence, MIG and temperature per GPU, from the facts."""
    if not f["gpus"]:
        why = f["driver"]["nvidia_smi_error"] or (
            "no nvidia-smi" if not f["driver"]["nvidia_smi"] else ""
        )
        status = "skip" if not f["pci_gpus"] else "fail"
        what = "no NVIDIA GPU detected" if not f["pci_gpus"] else f"nvidia-smi lists no GPU ({why})"
        return [_check("nvidia-smi", status, what)]
    out = [
        _check(
            "driver",
            "ok",
            f"driver {f['driver']['version']} "
            f"({f['driver']['kernel_modules'] or 'module type unknown'}), "
            f"CUDA {f['cuda_driver_version'] or '?'}",
            driver=f["driver"]["version"],
            cuda=f["cuda_driver_version"],
        )
    ]
    for g in f["gpus"]:
        problems, warnings = [], []
        if (g.get("ecc.errors.uncorrected.volatile.total") or 0) > 0:
            problems.append(f"{g['ecc.errors.uncorrected.volatile.total']} uncorrected ECC errors")
        if g.get("ecc.mode.current") == "Disabled":
            warnings.append("ECC disabled")
        if g.get("persistence_mode") != "Enabled":
            warnings.append("persistence mode off (first CUDA call pays driver init)")
        if g.get("mig.mode.current") == "Enabled":
            warnings.append("MIG enabled (vLLM sees MIG slices, not the whole GPU)")
        temp = g.get("temperature.gpu")
        if isinstance(temp, int) and temp > max_temp_c:
            warnings.append(f"{temp} C > {max_temp_c} C")
        status = "fail" if problems else "warn" if warnings else "ok"
        detail = "; ".join(problems + warnings) or (
            f"{g.get('name')}, {g.get('memory.total')} MiB, ECC {g.get('ecc.mode.current')}, "
            f"persistence {g.get('persistence_mode')}, MIG {g.get('mig.mode.current')}, {temp} C"
        )
        out.append(
            _check(
                f"gpu{g.get('index')}",
                status,
                detail,
                gpu={
                    "name": g.get("name"),
                    "bus_id": g.get("pci.bus_id"),
                    "memory_mib": g.get("memory.total"),
                    "compute_cap": g.get("compute_cap"),
                    "ecc": g.get("ecc.mode.current"),
                    "ecc_uncorrected": g.get("ecc.errors.uncorrected.volatile.total"),
                    "persistence": g.get("persistence_mode"),
                    "mig": g.get("mig.mode.current"),
                    "temperature_c": temp,
                    "power_w": g.get("power.draw"),
                },
            )
        )
    if f["nvswitch_count"]:
        states = f["fabric_states"]
        bad = [s for s in states if s not in ("Completed", "N/A", "")]
        out.append(
            _check(
                "fabric",
                "fail" if bad else "ok",
                f"{f['nvswitch_count']} NVSwitch(es); fabric state {', '.join(states) or '?'}"
                + ("; start nvidia-fabricmanager" if bad else ""),
            )
        )
    return out


def kernel_log() -> tuple[str, str]:
    """(text, source) of this boot's kernel log: dmesg, else the journal."""
    rc, out, _ = _run(["dmesg"])
    if rc == 0 and out:
        return out, "dmesg"
    if shutil.which("journalctl"):
        rc, out, _ = _run(["journalctl", "-k", "-b", "--no-pager", "-q"])
        if rc == 0:
            return out, "journal"
    return "", ""


def check_xid() -> dict[str, Any]:
    text, source = kernel_log()
    if not source:
        return _check("xid", "skip", "kernel log unreadable (dmesg and journalctl failed)")
    xids = parse_xids(text)
    crit = [x for x in xids if x["critical"]]
    status = "fail" if crit else "warn" if xids else "ok"
    counts: dict[int, int] = {}
    for x in xids:
        counts[x["xid"]] = counts.get(x["xid"], 0) + 1
    detail = (
        f"no Xid errors in {source}"
        if not xids
        else "Xid " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) + f" ({source})"
    )
    return _check("xid", status, detail, xids=xids[-20:], source=source)


def _has_torch(python: str) -> bool:
    rc, _, _ = _run([python, "-c", "import torch; assert torch.cuda.is_available()"], timeout=120)
    return rc == 0


def find_torch_python(candidates: list[str], only: bool = False) -> str:
    """The first interpreter with torch and CUDA: the candidates in order (the engine's venv
    first), then this one unless `only` (the gate must measure with what the engine runs)."""
    for python in [*candidates, *([] if only else [sys.executable])]:
        if python and os.path.exists(python) and _has_torch(python):
            return python
    return ""


def _torch_json(python: str, what: str, timeout: float, **opts: Any) -> dict[str, Any]:
    env = dict(os.environ)
    # A check must not create NVLink multicast objects: they are shared host-wide, and a
    # program that misuses them has taken a host's GPUs out of service before.
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    argv = [python, os.path.abspath(__file__), what, json.dumps(opts)]
    try:
        p = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return {"status": "fail", "detail": f"{what} did not finish within {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "fail", "detail": f"{what} failed: {tail[:300]}"}
    return json.loads(lines[-1])


# Dense bf16 matmul ceiling above every GPU made (B200: ~2,250 TFLOP/s): a measured figure over it
# means the timing is wrong (events on another device's stream), as the first two-GPU run showed.
MAX_PLAUSIBLE_TFLOPS = 5000


def gemm_gate(
    gpus: list[dict[str, Any]],
    *,
    min_tflops: float = 0.0,
    peaks: dict[str, float] | None = None,
    min_share: float = 0.0,
    waived: bool = False,
) -> tuple[str, list[str]]:
    """(status, reasons) for measured GEMM figures [{index, name, tflops}].

    Each GPU is held to the higher of `min_tflops` and `min_share` of its type's dense bf16 peak
    (`peaks`, by the name nvidia-smi and torch print; installer/gpu/matrix.py). Below it fails,
    or warns when the inventory waives the gate (gpu.gate.waive).
    """
    lows = []
    for g in gpus:
        peak = next((v for k, v in (peaks or {}).items() if k.lower() == str(g.get("name", "")).lower()), 0.0)
        share_floor = min_share * peak
        floor = max(min_tflops, share_floor)
        if floor and g["tflops"] < floor:
            basis = (
                f"{min_share:g} of its {peak:g} TFLOP/s dense bf16 peak"
                if share_floor >= min_tflops
                else "the inventory's minimum"
            )
            lows.append(
                f"gpu{g['index']} ({g.get('name') or 'GPU'}) ran {g['tflops']:.0f} TFLOP/s, below the "
                f"gate's {floor:.0f} TFLOP/s ({basis})"
            )
    if not lows:
        return "ok", []
    if waived:
        return "warn", [*lows, "gate waived by gpu.gate.waive: true in the inventory"]
    return "fail", [
        *lows,
        "a throttled, power-capped or faulty GPU; fix it, lower gpu.gate.min_share, or set "
        "gpu.gate.waive: true in the inventory to deploy anyway",
    ]


def check_gemm(
    python: str,
    size: int,
    iters: int,
    min_tflops: float,
    *,
    peaks: dict[str, float] | None = None,
    min_share: float = 0.0,
    waived: bool = False,
) -> dict[str, Any]:
    r = _torch_json(python, "_gemm", 300, size=size, iters=iters)
    if r.get("status") == "fail":
        return _check("gemm", "fail", r["detail"])
    bad = [g for g in r["gpus"] if not g["correct"]]
    gate, lows = gemm_gate(r["gpus"], min_tflops=min_tflops, peaks=peaks, min_share=min_share, waived=waived)
    # a figure no GPU reaches is a broken measurement, not a fast GPU: say so instead of passing
    odd = [g for g in r["gpus"] if g["tflops"] > MAX_PLAUSIBLE_TFLOPS]
    tf = ", ".join(f"gpu{g['index']} {g['tflops']:.0f}" for g in r["gpus"])
    status = "fail" if bad or odd or gate == "fail" else gate
    detail = (
        f"{size}^3 bf16 matmul TFLOP/s: {tf}"
        + (f"; wrong result on {[g['index'] for g in bad]}" if bad else "")
        + "".join(f"; {x}" for x in lows)
        + (f"; timing implausible on {[g['index'] for g in odd]} (over {MAX_PLAUSIBLE_TFLOPS})" if odd else "")
    )
    return _check("gemm", status, detail, gpus=r["gpus"], torch=r.get("torch"), python=python)


def nccl_expectation(f: dict[str, Any]) -> dict[str, Any]:
    """What the all-reduce should reach on this host: expected_busbw for its worst GPU link."""
    gpus = f.get("gpus") or []
    gens = [int(g["pcie.link.gen.max"]) for g in gpus if isinstance(g.get("pcie.link.gen.max"), int)]
    widths = [int(g["pcie.link.width.max"]) for g in gpus if isinstance(g.get("pcie.link.width.max"), int)]
    link = (f.get("topology") or {}).get("interconnect", "")
    return expected_busbw(link, str(f.get("generation", "")), min(gens, default=0), min(widths, default=16))


def check_nccl(
    python: str, size_mib: int, iters: int, expected: dict[str, Any] | None = None
) -> dict[str, Any]:
    """NCCL all-reduce over every GPU (one process per GPU), bus bandwidth against `expected`."""
    sizes = sorted({max(1, size_mib // 8), size_mib, size_mib * 4})
    r = _torch_json(python, "_allreduce", 600, sizes_mib=sizes, iters=iters)
    if r.get("status") == "fail":
        return _check("nccl", "fail", r["detail"])
    status = "ok" if r["correct"] else "fail"
    if r["world_size"] == 1:
        # one GPU: NCCL starts and reduces in place, but no data crosses a link to measure
        detail = (
            f"all-reduce on 1 GPU: NCCL {r.get('nccl')} initialised, result "
            f"{'correct' if r['correct'] else 'WRONG'} (no inter-GPU traffic to measure)"
        )
        return _check("nccl", status, detail, **{k: v for k, v in r.items() if k != "status"})
    exp = expected or {}
    note = ""
    if exp.get("low"):
        # well under the low end means a link down, P2P disabled or traffic through the CPU
        if r["busbw_gbps"] < 0.7 * exp["low"] and status == "ok":
            status = "warn"
            note = f"; below 70% of the {exp['low']}-{exp['high']} GB/s expected for {exp['link']}"
        else:
            note = f" (expected {exp['low']}-{exp['high']} GB/s for {exp['link']})"
    detail = (
        f"all-reduce over {r['world_size']} GPUs, best of {', '.join(str(s) for s in sizes)} MiB: "
        f"bus bandwidth {r['busbw_gbps']:.1f} GB/s at {r['size_mib']} MiB{note}; "
        f"result {'correct' if r['correct'] else 'WRONG'} (NCCL {r.get('nccl')})"
    )
    return _check(
        "nccl", status, detail, expected=exp, **{k: v for k, v in r.items() if k != "status"}
    )


def check(
    gemm: bool = True,
    nccl: bool = True,
    torch_pythons: list[str] | None = None,
    gemm_size: int = 8192,
    gemm_iters: int = 10,
    min_tflops: float = 0.0,
    nccl_mib: int = 256,
    nccl_iters: int = 20,
    peaks: dict[str, float] | None = None,
    min_share: float = 0.0,
    waived: bool = False,
    torch_required: bool = False,
) -> dict[str, Any]:
    """torch_required: only `torch_pythons` may run the GEMM and all-reduce (the engine's own
    environment, as the gate runs them), and a missing torch fails instead of skipping."""
    start = time.monotonic()
    f = facts()
    checks = check_smi(f)
    if f["gpus"]:
        checks.append(check_xid())
        candidates = torch_pythons or []
        python = find_torch_python(candidates, only=torch_required) if (gemm or nccl) else ""
        missing = (
            f"no torch with CUDA in {', '.join(candidates)}: the engine cannot use the GPUs either"
            if torch_required
            else "no Python with torch and CUDA on this host"
        )
        for wanted, name, run in (
            (gemm, "gemm", lambda: check_gemm(
                python, gemm_size, gemm_iters, min_tflops, peaks=peaks, min_share=min_share, waived=waived
            )),
            (nccl, "nccl", lambda: check_nccl(python, nccl_mib, nccl_iters, nccl_expectation(f))),
        ):
            if not wanted:
                continue
            checks.append(
                run() if python else _check(name, "fail" if torch_required else "skip", missing)
            )
    ranks = {"skip": 0, "ok": 1, "warn": 2, "fail": 3}
    worst = max((c["status"] for c in checks), key=ranks.__getitem__, default="skip")
    return {
        "host": f["host"],
        "status": worst,
        "ok": worst != "fail",
        "seconds": round(time.monotonic() - start, 1),
        "facts": f,
        "checks": checks,
    }


def summary_line(result: dict[str, Any] | None) -> str:
    """One line for the `installer up` summary table from a check() result; "" without one."""
    if not result:
        return ""
    f = result.get("facts") or {}
    gpus = f.get("gpus") or []
    head = (
        f"{result.get('status')}: {len(gpus)}x {gpus[0].get('name') if gpus else 'GPU'}, "
        f"driver {(f.get('driver') or {}).get('version') or '-'}, CUDA {f.get('cuda_driver_version') or '-'}"
    )
    parts = [head]
    for c in result.get("checks") or []:
        if c.get("name") == "gemm" and c.get("gpus"):
            parts.append(f"gemm {c['status']} >= {min(g['tflops'] for g in c['gpus']):.0f} TFLOP/s")
        elif c.get("status") == "ok" and c.get("name") not in ("xid", "nccl"):
            continue  # per-GPU and driver checks that passed: the head says it
        else:
            parts.append(f"{c.get('name')} {c.get('status')}")
    return "; ".join(parts)


# ---------------------------------------------------------------- torch workers (subprocesses)


def _gemm_worker(opts: dict[str, Any]) -> None:
    import torch

    n, iters = int(opts["size"]), int(opts["iters"])
    gpus = []
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        gen = torch.Generator(device=dev).manual_seed(i)
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
        # Events record on the *current* device's stream: without making GPU i current they
        # timed GPU 0's idle stream while GPU i multiplied (the first two-GPU run, 2026-11-29,
        # reported 41,938 TFLOP/s for GPU 1)
        with torch.cuda.device(dev):
            for _ in range(3):
                c = a @ b
            torch.cuda.synchronize(dev)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(iters):
                c = a @ b
            t1.record()
            torch.cuda.synchronize(dev)
        ms = t0.elapsed_time(t1) / iters
        # correctness on a slice: bf16 inputs, fp32 accumulation, against an fp64 reference
        k = 256
        ref = a[:k].double() @ b[:, :k].double()
        err = ((c[:k, :k].double() - ref).abs().max() / ref.abs().max()).item()
        gpus.append(
            {
                "index": i,
                "name": torch.cuda.get_device_name(i),
                "ms": round(ms, 3),
                "tflops": round(2 * n**3 / (ms / 1e3) / 1e12, 1),
                "max_rel_error": err,
                "correct": err < 2e-2,
            }
        )
        del a, b, c
        torch.cuda.empty_cache()
    print(json.dumps({"status": "ok", "torch": torch.__version__, "gpus": gpus}))


def _allreduce_rank(rank: int, world: int, port: int, opts: dict[str, Any], out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    kwargs = {"init_method": f"tcp://127.0.0.1:{port}", "rank": rank, "world_size": world}
    try:  # binding the device up front (torch >= 2.3) avoids a guess in barrier()
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank), **kwargs)
    except TypeError:
        dist.init_process_group("nccl", **kwargs)
    sizes = [int(m) for m in opts.get("sizes_mib") or [opts.get("size_mib", 256)]]
    iters = int(opts["iters"])
    expect = world * (world + 1) / 2
    correct = True
    rows = []
    for mib in sizes:
        numel = mib * 1024 * 1024 // 4
        x = torch.full((numel,), float(rank + 1), device="cuda", dtype=torch.float32)
        for _ in range(3):
            y = x.clone()
            dist.all_reduce(y)
        torch.cuda.synchronize()
        correct = correct and bool(torch.all(y == expect).item())
        bufs = [x.clone() for _ in range(2)]
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(iters):
            dist.all_reduce(bufs[i % 2])
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / iters
        algbw = numel * 4 / seconds / 1e9
        # nccl-tests' bus bandwidth: what each link carries in a ring all-reduce
        rows.append({"size_mib": mib, "time_ms": seconds * 1e3, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * 2 * (world - 1) / world})
        del x, y, bufs
        torch.cuda.empty_cache()
    flags = torch.tensor([1 if correct else 0], device="cuda")
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    if rank == 0:
        best = max(rows, key=lambda r: r["busbw_gbps"])
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        out.put(
            {
                "status": "ok",
                "world_size": world,
                **best,
                "sizes": rows,
                "correct": bool(flags.item()),
                "nccl": nccl,
                "torch": torch.__version__,
            }
        )
    dist.destroy_process_group()


def _allreduce_worker(opts: dict[str, Any]) -> None:
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(
        _allreduce_rank,
        args=(world, port, opts, out),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    print(json.dumps(out.get()))


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("_gemm", "_allreduce"):
        opts = json.loads(argv[1]) if len(argv) > 1 else {}
        (_gemm_worker if argv[0] == "_gemm" else _allreduce_worker)(opts)
        return 0
    ap = argparse.ArgumentParser(description="NVIDIA GPU facts and checks for this host (JSON).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    fa = sub.add_parser("facts", help="GPUs, driver, NUMA, NVSwitch; changes nothing")
    fa.add_argument(
        "--assume-gpus",
        default="",
        help="package tests only: JSON {count, generation, nvswitches, cuda_driver_version} for a host "
        "without GPUs; the driver version comes from the installed nvidia-driver-* package",
    )
    c = sub.add_parser("check", help="facts + nvidia-smi health, Xid errors, GEMM, all-reduce")
    c.add_argument("--no-gemm", action="store_true")
    c.add_argument("--no-nccl", action="store_true")
    c.add_argument(
        "--torch-python",
        action="append",
        default=[],
        help="interpreter to try for torch (repeatable); this one is tried first",
    )
    c.add_argument("--gemm-size", type=int, default=8192)
    c.add_argument("--min-tflops", type=float, default=0.0)
    c.add_argument(
        "--peak-tflops",
        default="{}",
        help="JSON {nvidia-smi name: dense bf16 peak TFLOP/s} (installer/gpu/matrix.py)",
    )
    c.add_argument("--min-share", type=float, default=0.0, help="fail a GEMM below this share of its peak")
    c.add_argument("--waive", action="store_true", help="a GEMM below the gate warns instead of failing")
    c.add_argument(
        "--torch-required",
        action="store_true",
        help="use only the --torch-python interpreters and fail when none has torch with CUDA",
    )
    c.add_argument("--nccl-mib", type=int, default=256)
    c.add_argument("--fail-on-warn", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "facts":
        print(json.dumps(assumed_facts(json.loads(args.assume_gpus)) if args.assume_gpus else facts()))
        return 0
    result = check(
        gemm=not args.no_gemm,
        nccl=not args.no_nccl,
        torch_pythons=args.torch_python,
        gemm_size=args.gemm_size,
        min_tflops=args.min_tflops,
        nccl_mib=args.nccl_mib,
        peaks={str(k): float(v) for k, v in json.loads(args.peak_tflops).items()},
        min_share=args.min_share,
        waived=args.waive,
        torch_required=args.torch_required,
    )
    print(json.dumps(result))
    return (
        1 if result["status"] == "fail" or (args.fail_on_warn and result["status"] == "warn") else 0
    )


if __name__ == "__main__":
    sys.exit(main())
