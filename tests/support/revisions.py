"""A two-host site with its state anchored next to it, a revision recorded for it, and the
release.json a host running that revision would answer: for tests of the unknown-revision check."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from installer.base import paths
from installer.bundle import sign
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, FileEntry, Manifest, scan
from installer.inventory import load_inventory
from installer.state import revisions

SITE = (
    "deployment: demo\nhosts: [{name: a, address: 10.0.0.1}, {name: b, address: 10.0.0.2}]\n"
    "model: {path: weights, served_name: tiny}\nengine: {device: cpu}\n"
)


@contextmanager
def anchored_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cwd: Path) -> Iterator[Path]:
    """site/site.yml, its state anchored next to it, commands run from cwd."""
    monkeypatch.delenv("INSTALLER_STATE_DIR", raising=False)
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "site" / "weights").mkdir(parents=True)
    (tmp_path / "site" / "weights" / "config.json").write_text("{}")
    (tmp_path / "site" / "site.yml").write_text(SITE)
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)
    paths.use_state_dir(None)
    paths.anchor_state_to(tmp_path / "site" / "site.yml")
    try:
        yield tmp_path / "site" / "site.yml"
    finally:
        paths.use_state_dir(None)


def known_revision(site: Path) -> revisions.Revision:
    """Revision 1 of the site, recorded in its state."""
    playbooks = site.parent / "playbooks"
    playbooks.mkdir(exist_ok=True)
    (playbooks / "site.yml").write_text("---\n")
    man = Manifest(target={}, components={}, packages=[], files=[FileEntry("wheels/x.whl", 1, "a" * 64)])
    return revisions.next_revision(load_inventory(site), man, site.parent, playbooks)


def release_record(rev: revisions.Revision, **change: Any) -> str:
    """release.json as the release role writes it (to_nice_json: several lines)."""
    record = {
        "deployment": rev.deployment,
        "revision": rev.number,
        "config": rev.config_digest,
        "bundle_id": rev.bundle_id,
        "release_id": rev.release_id,
        "previous_revision": None,
    }
    return json.dumps({**record, **change}, indent=4)


def signed_bundle(site: Path) -> Path:
    """A bundle folder next to the site, signed by a key the site's state trusts."""
    root = site.parent / "bundle"
    (root / "playbooks").mkdir(parents=True)
    (root / "playbooks" / "site.yml").write_text("---\n")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    man = Manifest({"os": "debian-12"}, {}, [], scan(root))
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    key = sign.keygen()  # into the state next to the inventory: the trusted keys of `up -i site.yml`
    private = sign.load_private_key(key.private_key)
    (root / SIGNATURE).write_bytes(sign.signature_for((root / MANIFEST).read_bytes(), private))
    return root
