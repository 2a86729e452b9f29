"""Read a bundle's SBOM (sbom.cdx.json) from a bundle tar or directory, checked against its manifest.

Like `bundle inspect`, this reads the manifest and the one file it needs, not the hundreds of GB
around it: the SBOM's bytes must have the sha256 the manifest lists, and `installer bundle sbom`
also checks the manifest's signature, so what is printed is what was signed.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from installer.bundle import build, contents, sbom, sign
from installer.bundle.manifest import SBOM, Manifest, parse
from installer.errors import BundleError


def _member(path: Path, name: str) -> bytes | None:
    if path.is_dir():
        f = path / name
        return f.read_bytes() if f.is_file() else None
    try:
        with tarfile.open(path, "r:") as tar:  # seekable: skipping a member does not read it
            for member in tar:
                if member.name.removeprefix("./") == name and member.isfile():
                    fh = tar.extractfile(member)
                    return fh.read() if fh else None
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{path} is not a readable bundle tar: {exc}") from exc
    return None


def _checked(path: Path, man: Manifest) -> bytes | None:
    entry = next((f for f in man.files if f.path == SBOM), None)
    if entry is None:
        return None
    data = _member(path, SBOM)
    if data is None:
        raise BundleError(f"{path}: its manifest lists {SBOM} and the bundle lacks it",
                          ["copy the bundle again from the original, or rebuild it"])
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise BundleError(f"{path}: {SBOM} does not match the manifest's sha256 (changed or corrupted)",
                          ["copy the bundle again from the original, or rebuild it"])
    return data


def _parsed(path: Path, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise BundleError(f"{path}: {SBOM} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BundleError(f"{path}: {SBOM} is not a CycloneDX document")
    return doc


def of_bundle(path: Path, man: Manifest) -> dict[str, Any] | None:
    """The SBOM of the bundle at `path` whose manifest is `man`; None for a bundle built before SBOMs."""
    data = _checked(path, man)
    return None if data is None else _parsed(path, data)


@dataclass(frozen=True)
class SignedSbom:
    text: str  # the file as signed, byte for byte
    entries: list[sbom.Entry]
    signature: sign.SignatureCheck


def read(path: Path, trust: sign.Trust) -> SignedSbom:
    """The SBOM of a bundle whose manifest's signature is trusted (or accepted with --insecure)."""
    if not path.exists():
        raise BundleError(f"bundle {path} does not exist; build one with `installer bundle build`")
    manifest_bytes, sig = build.read_meta(path)
    check = sign.check_signature(manifest_bytes, sig, trust, str(path))
    man = parse(manifest_bytes, path)
    data = _checked(path, man)
    if data is None:
        raise BundleError(f"{path} has no {SBOM}: it was built before bundles carried one",
                          ["rebuild it with `installer bundle build`"])
    return SignedSbom(data.decode(), sbom.entries(_parsed(path, data)), check)


@dataclass(frozen=True)
class Diff:
    bundle: contents.BundleDiff
    sbom: list[sbom.Change] | None  # None when either bundle has no SBOM


def diff(old: Path, new: Path) -> Diff:
    """What changes from bundle `old` to `new`: files and sizes (manifests), components (SBOMs)."""
    mans = []
    docs = []
    for path in (old, new):
        man = parse(build.read_meta(path)[0], path)
        mans.append(man)
        docs.append(of_bundle(path, man))
    changes = None
    if docs[0] is not None and docs[1] is not None:
        changes = sbom.diff(sbom.entries(docs[0]), sbom.entries(docs[1]))
    return Diff(contents.diff(mans[0], mans[1]), changes)
