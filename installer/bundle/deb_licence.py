"""The licence a .deb's Debian copyright file states, for the bundle's SBOM (sbom.py).

Debian keeps it in /usr/share/doc/<package>/copyright, in the package's data archive. Only the
machine-readable format (DEP-5) names licences in a way a program can read: the `License:` of its
`Files: *` paragraph, else every licence it names. Reading it means unpacking the data archive,
so only small packages whose archive the standard library reads (xz, gz, none; not zstd) are
looked at; the rest get no licence rather than a slow build.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

MAX_SIZE = 8 << 20
_AR_MAGIC = b"!<arch>\n"


def _data_member(deb: Path) -> tuple[str, bytes] | None:
    with deb.open("rb") as fh:
        if fh.read(8) != _AR_MAGIC:
            return None
        while len(header := fh.read(60)) == 60:
            name = header[:16].decode(errors="replace").strip().rstrip("/")
            size = int(header[48:58].decode().strip() or 0)
            if name in ("data.tar", "data.tar.xz", "data.tar.gz"):
                return name, fh.read(size)
            fh.seek(size + (size & 1), io.SEEK_CUR)
    return None


def licences_in(copyright_text: str) -> list[str]:
    """The licences a DEP-5 copyright file names (the `Files: *` one first); [] for free text."""
    paragraphs = [p for p in copyright_text.split("\n\n") if p.strip()]
    if not paragraphs or "copyright-format" not in paragraphs[0].split("\n", 1)[0]:
        return []
    main: list[str] = []
    others: list[str] = []
    for para in paragraphs:
        fields = {}
        for line in para.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
        if fields.get("license") and "files" in fields:
            (main if fields["files"] == "*" else others).append(fields["license"])
    found = main or others
    return list(dict.fromkeys(found))


def of_deb(deb: Path, package: str) -> list[str]:
    """The licences package `package`'s copyright file names, [] when none can be read cheaply."""
    if deb.stat().st_size > MAX_SIZE:
        return []
    try:
        member = _data_member(deb)
        if member is None:
            return []
        with tarfile.open(fileobj=io.BytesIO(member[1]), mode="r:*") as tar:
            for info in tar:
                if info.name.removeprefix("./") == f"usr/share/doc/{package}/copyright" and info.isfile():
                    fh = tar.extractfile(info)
                    return licences_in(fh.read().decode("utf-8", "replace")) if fh else []
    except (OSError, ValueError, tarfile.TarError, EOFError):
        return []  # an unreadable archive is the manifest's and apt's concern, not the SBOM's
    return []
