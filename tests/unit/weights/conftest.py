"""Shared by the fan-out server's tests: a deployment CA with a server's and a client's
certificate, another CA's (a stranger's), and a model folder with its signed list."""

import os
from pathlib import Path

import pytest

from installer.tls import ca
from installer.weights import verify


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    authority = ca.create_ca("fanout-unit")
    other = ca.create_ca("someone-else")
    files: dict[str, Path] = {}
    for name, issuer in (("server", authority), ("client", authority), ("stranger", other)):
        issued = ca.issue_server(issuer, name, [name], ["127.0.0.1"], 1)
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_bytes(issued.cert_pem)
        files[name + "-key"] = tmp_path / f"{name}.key"
        files[name + "-key"].write_bytes(issued.key_pem)
    files["ca"] = tmp_path / "ca.pem"
    files["ca"].write_bytes(authority.cert_pem)
    return files


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, list[dict]]:
    root = tmp_path / "model"
    root.mkdir()
    (root / "a.safetensors").write_bytes(os.urandom(100_000))
    (root / "b.safetensors").write_bytes(os.urandom(1000))
    entries = verify.describe(str(root))
    entries.append({"path": "later.safetensors", "size": 5, "sha256": "0" * 64})
    return root, entries
