"""Small real bundles (a few files, the manifest, an ed25519 signature) standing in for a built one."""

import io
import os
import zipfile
from pathlib import Path

from installer.bundle import sbom, sign
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, Manifest, scan


def make_bundle(
    root: Path, key: Path | None, files: dict[str, bytes] | None = None,
    packages: list[dict[str, str]] | None = None, with_sbom: bool = False,
) -> Manifest:
    """A bundle directory laid out like build._assemble's, signed with `key` when given; with
    `with_sbom`, sbom.cdx.json is written as the build writes it, before the manifest."""
    files = files or {
        "wheels/demo-1.0-py3-none-any.whl": b"wheel bytes" * 100,
        "model/config.json": b'{"hidden_size": 64}',
        "model/model.safetensors": os.urandom(300_000),
        "tools/uv": b"#!/bin/sh\necho uv\n",
        "playbooks/site.yml": b"---\n- hosts: all\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    if (root / "tools/uv").exists():
        (root / "tools/uv").chmod(0o755)
    versions = {"demo": "1.0", "uv": "0.13.9"}
    if with_sbom:
        sbom.write(root, scan(root), versions, packages or [], "demo-model")
    man = Manifest({"os": "debian-12"}, versions, packages or [], scan(root))
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    if key is not None:
        private = sign.load_private_key(key)
        (root / SIGNATURE).write_bytes(sign.signature_for((root / MANIFEST).read_bytes(), private))
    return man


def wheel(name: str, version: str, metadata: list[str]) -> bytes:
    """A minimal real wheel (a zip with dist-info/METADATA holding `metadata`'s header lines)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", *metadata]
        zf.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")
        zf.writestr(f"{name}/__init__.py", "")
    return buf.getvalue()
