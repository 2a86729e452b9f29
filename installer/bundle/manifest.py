"""The bundle manifest: every file with size and sha256, component versions, and the target.

The bundle id is the sha256 of the sorted (path, sha256, size) list, so two bundles with the
same bytes have the same id. The release id (what a host's release directory is named after)
covers the same list without the playbooks and the weights: a change to the configuration code
or to a model's weights alone reuses the release (its environments) instead of making a new one;
the model role copies new weights and restarts the engines that read them.

manifest.json is what gets signed (manifest.json.sig, see sign.py); bundle.sha256 is derived
from it, and `verify` checks that it is, so a host that checks bundle.sha256 checks the signed list.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from installer.base.errors import BundleError
from installer.base.hashing import sha256_files

MANIFEST = "manifest.json"
CHECKSUMS = "bundle.sha256"  # sha256sum format, so hosts verify with coreutils alone
SIGNATURE = "manifest.json.sig"
# Not listed in the manifest: the manifest itself, what is derived from it, what signs it.
META_FILES = (MANIFEST, SIGNATURE, CHECKSUMS)
# Configuration code: part of the bundle (and of its signature), not of the release identity.
PLAYBOOKS_PREFIX = "playbooks/"
# Used on the control machine only (Terraform and its provider mirror): never sent to hosts,
# and not part of the release identity either.
CONTROL_ONLY_PREFIXES = ("terraform/",)
# The software bill of materials (sbom.py): listed and signed like any file, but derived from the
# others (and naming Terraform's), so not part of the release identity either.
SBOM = "sbom.cdx.json"
DERIVED_FILES = (SBOM,)
# The weights (the primary model at model/, the others at models/<folder>/, each with its
# sha256sum list): data the model role copies, not part of the environments a release installs.
WEIGHTS_PREFIXES = ("model/", "models/")
WEIGHTS_FILES = ("model.sha256",)
FORMAT = 1


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str


@dataclass
class Manifest:
    target: dict[str, str]
    components: dict[str, Any]
    packages: list[dict[str, str]]
    files: list[FileEntry] = field(default_factory=list)
    format: int = FORMAT

    @property
    def bundle_id(self) -> str:
        digest = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            digest.update(f"{f.path}\0{f.sha256}\0{f.size}\n".encode())
        return digest.hexdigest()

    @property
    def release_id(self) -> str:
        digest = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            if not _outside_release(f.path):
                digest.update(f"{f.path}\0{f.sha256}\0{f.size}\n".encode())
        return "r-" + digest.hexdigest()[:12]

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def host_files(self) -> list[FileEntry]:
        """What every host receives: all files but the control machine's own tools."""
        return [f for f in self.files if not f.path.startswith(CONTROL_ONLY_PREFIXES)]

    @property
    def host_size(self) -> int:
        return sum(f.size for f in self.host_files)

    def to_json(self) -> str:
        data = asdict(self)
        data["bundle_id"] = self.bundle_id
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise BundleError(
                f"bundle format {data.get('format')!r} is not {FORMAT}; "
                "rebuild the bundle with this installer version"
            )
        files = [FileEntry(**f) for f in data["files"]]
        man = cls(data["target"], data["components"], data["packages"], files)
        if data.get("bundle_id") != man.bundle_id:
            raise BundleError("manifest.json is inconsistent (bundle_id does not match its file list)")
        return man

    def checksums_text(self, prefix: str = "") -> str:
        """sha256sum -c input for the files under `prefix` (paths made relative to it)."""
        lines = [
            f"{f.sha256}  {f.path.removeprefix(prefix)}"
            for f in sorted(self.files, key=lambda f: f.path)
            if f.path.startswith(prefix)
        ]
        return "\n".join(lines) + "\n"


def _outside_release(path: str) -> bool:
    return (
        path.startswith((PLAYBOOKS_PREFIX, *CONTROL_ONLY_PREFIXES, *WEIGHTS_PREFIXES))
        or path in DERIVED_FILES or path in WEIGHTS_FILES
    )


def scan(root: Path) -> list[FileEntry]:
    """Hash every regular file under root (except the manifest, its signature and checksum list)."""
    paths = sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).as_posix() not in META_FILES
    )
    hashes = sha256_files(paths)
    return [FileEntry(p.relative_to(root).as_posix(), p.stat().st_size, hashes[p]) for p in paths]


def parse(text: str | bytes, where: Path) -> Manifest:
    """A Manifest from manifest.json's bytes, or BundleError saying the file is unusable."""
    try:
        return Manifest.from_json(text.decode() if isinstance(text, bytes) else text)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{where} is unreadable: {exc}") from exc


def compare(man: Manifest, present: dict[str, FileEntry]) -> list[str]:
    """Problems of `present` (what a bundle holds) against the manifest; empty when they agree."""
    present = dict(present)
    problems: list[str] = []
    for entry in man.files:
        got = present.pop(entry.path, None)
        if got is None:
            problems.append(f"{entry.path}: missing")
        elif got.size != entry.size:
            problems.append(f"{entry.path}: size {got.size}, manifest says {entry.size}")
        elif got.sha256 != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch (file changed or corrupted)")
    problems += [f"{path}: not listed in the manifest" for path in sorted(present)]
    return problems


def verify(root: Path, manifest_bytes: bytes | None = None) -> Manifest:
    """Check every file of a bundle directory against its manifest; BundleError names each problem.

    `manifest_bytes`: the manifest already read (and its signature checked) by the caller, so
    the list checked is exactly the list signed, whatever happens to the file meanwhile.
    """
    if manifest_bytes is None:
        try:
            manifest_bytes = (root / MANIFEST).read_bytes()
        except FileNotFoundError as exc:
            raise BundleError(f"{root} is not a bundle: it has no {MANIFEST}") from exc
    man = parse(manifest_bytes, root / MANIFEST)
    problems = compare(man, {f.path: f for f in scan(root)})
    try:
        checksums_ok = (root / CHECKSUMS).read_text() == man.checksums_text()
    except (OSError, UnicodeDecodeError):
        checksums_ok = False
    if not checksums_ok:
        problems.append(f"{CHECKSUMS}: does not match {MANIFEST} (hosts check files against it)")
    if problems:
        raise BundleError(
            f"bundle {root} failed verification ({len(problems)} problem(s)); "
            "rebuild or re-copy it",
            problems[:20],
        )
    return man
