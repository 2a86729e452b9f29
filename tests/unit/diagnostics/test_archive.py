"""The support archive's layout (installer/diagnostics/archive.py): one root folder, the
manifest and MISSING.txt beside the deployment's files and a folder per host, redactions by
their path in the archive, written 0600 and atomically."""

import json
import os
import tarfile
from pathlib import Path

from installer.diagnostics import archive
from installer.diagnostics.redact import Hit

TAKEN = 1796155200.0  # 2026-12-01T20:00:00Z


def _parts() -> list[archive.Part]:
    h1 = archive.Part("h1", {"versions.json": b"{}", "journal/private-llm-engine.service.log": b"x"},
                      {"nvidia-smi-q.txt": "nvidia-smi not found: no NVIDIA driver"},
                      [{"path": "/etc/private-llm/keys.json", "why": "API key hashes"}],
                      [Hit("config/etc/private-llm/gateway.yml", "url-password", 1)])
    h2 = archive.Part("h2", {}, {"(all)": "ssh rc 255: Connection refused: nothing collected from this host"})
    dep = archive.Part("", {"status.json": b"{}", "prometheus.csv": b"series\n"},
                       {"prometheus.csv:gpu_memory_slope_bytes_per_s": "no sample in the last hour"})
    return [h1, h2, dep]


def test_layout_manifest_and_missing() -> None:
    files = archive.layout("demo", TAKEN, _parts())
    assert sorted(files) == ["MANIFEST.json", "MISSING.txt", "hosts/h1/journal/private-llm-engine.service.log",
                             "hosts/h1/versions.json", "prometheus.csv", "status.json"]
    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["deployment"] == "demo" and manifest["taken_at"] == "2026-12-01T20:00:00Z"
    assert manifest["hosts"]["h1"]["collected"] == ["journal/private-llm-engine.service.log", "versions.json"]
    assert manifest["hosts"]["h1"]["excluded"][0]["path"] == "/etc/private-llm/keys.json"
    assert manifest["hosts"]["h2"] == {"collected": [], "excluded": [], "redactions": [],
                                       "missing": {"(all)": "ssh rc 255: Connection refused: nothing collected "
                                                            "from this host"}}
    assert manifest["deployment_files"]["collected"] == ["prometheus.csv", "status.json"]
    assert manifest["redactions"] == [{"file": "hosts/h1/config/etc/private-llm/gateway.yml",
                                       "rule": "url-password", "count": 1}]
    assert files["MISSING.txt"].decode().splitlines()[2:] == [
        "h1: nvidia-smi-q.txt: nvidia-smi not found: no NVIDIA driver",
        "h2: (all): ssh rc 255: Connection refused: nothing collected from this host",
        "deployment: prometheus.csv:gpu_memory_slope_bytes_per_s: no sample in the last hour",
    ]


def test_nothing_missing_says_so() -> None:
    assert archive.missing_text([archive.Part("h1", {"a": b""})]).endswith("Everything was collected.\n")


def test_written_0600_under_one_root_replacing_atomically(tmp_path: Path) -> None:
    path = tmp_path / "support.tar.gz"
    path.write_text("an older archive")
    os.chmod(path, 0o644)
    old_umask = os.umask(0)
    try:
        root = archive.root_name("demo", TAKEN)
        archive.write(path, root, archive.layout("demo", TAKEN, _parts()), TAKEN)
    finally:
        os.umask(old_umask)
    assert root == "pli-support-demo-20261201T200000Z"
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["support.tar.gz"]  # no temporary left beside it
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    assert members[0].name == root and members[0].isdir()
    assert all(m.name == root or m.name.startswith(root + "/") for m in members)
    assert all(m.mode == 0o600 for m in members if m.isfile())
    assert f"{root}/hosts/h1/versions.json" in {m.name for m in members}
