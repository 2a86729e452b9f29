"""Small real bundles (a few files, the manifest, an ed25519 signature) standing in for a built one."""

import os
from pathlib import Path

from installer.bundle import sign
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, Manifest, scan


def make_bundle(root: Path, key: Path | None, files: dict[str, bytes] | None = None) -> Manifest:
    """A bundle directory laid out like build._assemble's, signed with `key` when given."""
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
    man = Manifest({"os": "debian-12"}, {"demo": "1.0", "uv": "0.13.9"}, [], scan(root))
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    if key is not None:
        private = sign.load_private_key(key)
        (root / SIGNATURE).write_bytes(sign.signature_for((root / MANIFEST).read_bytes(), private))
    return man
