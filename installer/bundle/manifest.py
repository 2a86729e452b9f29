"""The bundle manifest: every file with size and sha256, component versions, and the target.

The bundle id is the sha256 of the sorted (path, sha256, size) list, so two bundles with the
same bytes have the same id, and the id alone names a release on the hosts.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from installer.errors import BundleError
from installer.hashing import sha256_files

MANIFEST = "manifest.json"
CHECKSUMS = "bundle.sha256"  # sha256sum format, so hosts verify with coreutils alone
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
        return "r-" + self.bundle_id[:12]

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

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


def scan(root: Path) -> list[FileEntry]:
    """Hash every regular file under root (except the manifest and checksum list themselves)."""
    paths = sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).as_posix() not in (MANIFEST, CHECKSUMS)
    )
    hashes = sha256_files(paths)
    return [FileEntry(p.relative_to(root).as_posix(), p.stat().st_size, hashes[p]) for p in paths]


def verify(root: Path) -> Manifest:
    """Check every file of a bundle directory against its manifest; raise BundleError naming each problem."""
    try:
        man = Manifest.from_json((root / MANIFEST).read_text())
    except FileNotFoundError as exc:
        raise BundleError(f"{root} is not a bundle: it has no {MANIFEST}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{root}/{MANIFEST} is unreadable: {exc}") from exc
    problems: list[str] = []
    present = {f.path: f for f in scan(root)}
    for entry in man.files:
        got = present.pop(entry.path, None)
        if got is None:
            problems.append(f"{entry.path}: missing")
        elif got.size != entry.size:
            problems.append(f"{entry.path}: size {got.size}, manifest says {entry.size}")
        elif got.sha256 != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch (file changed or corrupted)")
    problems += [f"{path}: not listed in the manifest" for path in sorted(present)]
    if problems:
        raise BundleError(
            f"bundle {root} failed verification ({len(problems)} problem(s)); rebuild or re-copy it",
            problems[:20],
        )
    return man
