"""Read a bundle's SBOM (sbom.cdx.json) from a bundle tar or directory, checked against its manifest.

Like `bundle inspect`, this reads the manifest and the one file it needs, not the hundreds of GB
around it: the SBOM's bytes must have the sha256 the manifest lists, and `installer bundle sbom`
and `bundle diff` also check the manifest's signature, so what is printed is what was signed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from installer.base.errors import BundleError
from installer.bundle import build, contents, sbom, sign
from installer.bundle.manifest import SBOM, Manifest, parse


def of_bundle(path: Path, man: Manifest) -> dict[str, Any] | None:
    """The SBOM of the bundle at `path` whose manifest is `man`; None for a bundle built before SBOMs."""
    data = build.sbom_bytes(path, man)
    return None if data is None else sbom.parse(data, path)


@dataclass(frozen=True)
class SignedSbom:
    text: str  # the file as signed, byte for byte
    entries: list[sbom.Entry]
    signature: sign.SignatureCheck


def _signed_manifest(path: Path, trust: sign.Trust) -> tuple[Manifest, sign.SignatureCheck]:
    """A bundle's manifest, parsed from the very bytes whose signature was checked (as
    build.check_bundle checks it: trusted, or accepted with --insecure)."""
    if not path.exists():
        raise BundleError(f"bundle {path} does not exist; build one with `installer bundle build`")
    manifest_bytes, sig = build.read_meta(path)
    check = sign.check_signature(manifest_bytes, sig, trust, str(path))
    return parse(manifest_bytes, path), check


def read(path: Path, trust: sign.Trust) -> SignedSbom:
    """The SBOM of a bundle whose manifest's signature is trusted (or accepted with --insecure)."""
    man, check = _signed_manifest(path, trust)
    data = build.sbom_bytes(path, man)
    if data is None:
        raise BundleError(f"{path} has no {SBOM}: it was built before bundles carried one",
                          ["rebuild it with `installer bundle build`"])
    return SignedSbom(data.decode(), sbom.entries(sbom.parse(data, path)), check)


@dataclass(frozen=True)
class Diff:
    bundle: contents.BundleDiff
    sbom: list[contents.Change] | None  # None when either bundle has no SBOM
    old_signature: sign.SignatureCheck
    new_signature: sign.SignatureCheck

    @property
    def unverified(self) -> list[tuple[str, str]]:
        """(old or new, why) for each side whose origin is not established (--insecure)."""
        sides = (("old", self.old_signature), ("new", self.new_signature))
        return [(side, check.insecure_reason or "") for side, check in sides if check.trusted_key is None]


def diff(old: Path, new: Path, trust: sign.Trust) -> Diff:
    """What changes from bundle `old` to `new`: files and sizes (manifests), components (SBOMs).

    Each side's signature is checked first, as `bundle verify` checks it: an unsigned or untrusted
    bundle is refused unless `trust` is insecure, and then its check says so (Diff.unverified),
    so a comparison of unverified bundles is never shown as one of what was signed."""
    old_man, old_check = _signed_manifest(old, trust)
    new_man, new_check = _signed_manifest(new, trust)
    docs = (of_bundle(old, old_man), of_bundle(new, new_man))
    changes = None
    if docs[0] is not None and docs[1] is not None:
        changes = sbom.diff(sbom.entries(docs[0]), sbom.entries(docs[1]))
    return Diff(contents.diff(old_man, new_man), changes, old_check, new_check)
