"""A local apt repository inside the bundle: `Packages` and `Release` for a folder of .deb files.

What `dpkg-scanpackages` + `apt-ftparchive release` make, written in Python so the build needs
neither (they are in dpkg-dev / apt-utils, which a build machine may lack). The repository is
"flat" (`deb [trusted=yes] file:/DIR ./`): hosts point a private apt configuration at it and
apt resolves and orders the installs, offline. `trusted=yes` is sound here because apt is not
what authenticates these files: every byte of the bundle, the index included, is checked
against the signed manifest before and after it reaches the host.

A .deb is an `ar` archive whose `control.tar.{xz,gz,zst}` member holds the `control` file;
xz and gz are read with the standard library, zstd (Ubuntu's default since 21.10) through
`dpkg-deb` when the standard library cannot.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
from email.utils import formatdate
from pathlib import Path

from installer.base.errors import BundleError

PACKAGES = "Packages"
RELEASE = "Release"
_AR_MAGIC = b"!<arch>\n"
_HASHES = (("MD5sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"))


def _ar_members(data: bytes, name: str) -> dict[str, bytes]:
    if not data.startswith(_AR_MAGIC):
        raise BundleError(f"{name} is not a Debian package (no ar header)")
    members, off = {}, len(_AR_MAGIC)
    while off + 60 <= len(data):
        header = data[off : off + 60]
        if header[58:60] != b"`\n":
            raise BundleError(f"{name}: damaged ar header at byte {off}")
        member = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        members[member] = data[off + 60 : off + 60 + size]
        off += 60 + size + (size & 1)
    return members


def _control_from_tar(blob: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:  # none, gz or xz
        for member in tar.getmembers():
            if member.name in ("./control", "control"):
                fh = tar.extractfile(member)
                if fh is not None:
                    return fh.read().decode()
    raise BundleError("control.tar has no control file")


def control_text(deb: Path) -> str:
    """The `control` paragraph of a .deb, as text."""
    members = _ar_members(deb.read_bytes(), deb.name)
    for compression in ("", ".gz", ".xz"):
        if f"control.tar{compression}" in members:
            return _control_from_tar(members[f"control.tar{compression}"])
    if any(m.startswith("control.tar") for m in members):
        # e.g. control.tar.zst: Python's tarfile cannot read zstd before 3.14.
        try:
            out = subprocess.run(
                ["dpkg-deb", "--field", str(deb)], capture_output=True, check=True, timeout=60
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            raise BundleError(
                f"{deb.name}: its control archive is zstd-compressed and dpkg-deb cannot read it",
                ["install dpkg (it provides dpkg-deb) on the build machine"],
            ) from exc
        return out.stdout.decode()
    raise BundleError(f"{deb.name} has no control archive")


def parse_paragraph(text: str) -> list[tuple[str, str]]:
    """deb822 fields in order; a continuation line stays part of its field's value."""
    fields: list[tuple[str, str]] = []
    for line in text.rstrip("\n").split("\n"):
        if line[:1] in (" ", "\t") and fields:
            name, value = fields[-1]
            fields[-1] = (name, value + "\n" + line)
        elif line.strip():
            name, _, value = line.partition(":")
            fields.append((name.strip(), value.strip()))
    return fields


def parse_index(text: str) -> list[dict[str, str]]:
    """A Packages file as one dict per paragraph."""
    return [dict(parse_paragraph(p)) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def stanza(deb: Path, filename: str) -> str:
    """The Packages paragraph for one .deb: its control fields plus where and what it is."""
    data = deb.read_bytes()
    fields = [(k, v) for k, v in parse_paragraph(control_text(deb)) if k != "Description"]
    description = dict(parse_paragraph(control_text(deb))).get("Description")
    fields += [("Filename", filename), ("Size", str(len(data)))]
    fields += [(label, hashlib.new(algo, data).hexdigest()) for label, algo in _HASHES]
    if description is not None:
        fields.append(("Description", description))
    return "".join(f"{k}: {v}\n" for k, v in fields)


def write_index(repo: Path) -> list[dict[str, str]]:
    """Write repo/Packages and repo/Release for the .deb files in repo; return the paragraphs.

    Deterministic (sorted, no timestamps from the files), so equal inputs give equal bytes and
    the bundle's cache key and signature stay stable.
    """
    debs = sorted(repo.glob("*.deb"))
    text = "\n".join(stanza(d, f"./{d.name}") for d in debs)
    (repo / PACKAGES).write_text(text)
    packages = (repo / PACKAGES).read_bytes()
    lines = [
        "Origin: private-llm-installer",
        "Label: private-llm bundle",
        "Suite: bundle",
        "Codename: bundle",
        # A fixed date: the Release file must not change when nothing else does.
        f"Date: {formatdate(0, usegmt=True)}",
    ]
    archs = sorted({p.get("Architecture", "") for p in parse_index(text)} - {""})
    if archs:
        lines.append(f"Architectures: {' '.join(archs)}")
    for label, algo in _HASHES:
        lines.append(f"{label}:")
        lines.append(f" {hashlib.new(algo, packages).hexdigest()} {len(packages)} {PACKAGES}")
    (repo / RELEASE).write_text("\n".join(lines) + "\n")
    return parse_index(text)


def index_of(debs: list[Path], scratch: Path) -> list[dict[str, str]]:
    """The index entries `debs` would have as a repository, read in `scratch` (removed after):
    a folder is checked this way before anything of it enters the bundle."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        for deb in debs:
            shutil.copy2(deb, scratch / deb.name)
        return write_index(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def copy_debs(debs: list[Path], dest: Path) -> list[Path]:
    """Copy `debs` into `dest` (made if missing); their new paths, in the same order."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for deb in debs:
        shutil.copy2(deb, dest / deb.name)
        out.append(dest / deb.name)
    return out
