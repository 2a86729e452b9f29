"""The tar inside the encryption: a manifest, the state folder's kept files, the audit key.

Layout: `MANIFEST.json` (format, time, what was left out, every entry's path, type, mode and
sha256), `state/<path>` for each directory and regular file, and `audit-key` when the trail is
keyed. Reading never extracts: each member is checked (a plain relative path under `state/`, no
`..`, a regular file or a directory, nothing else) and held in memory with its bytes matched
against the manifest, so a member that could escape the target (an absolute path, `..`, a link,
a device) or a manifest that disagrees with the members refuses the whole archive.
"""

import gzip
import hashlib
import io
import json
import stat
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from installer.state_archive import StateArchiveError

FORMAT = "private-llm-installer state archive 1"
MANIFEST = "MANIFEST.json"
STATE = "state"
AUDIT_KEY = "audit-key"
_MODE_BITS = 0o777  # no setuid, setgid or sticky bit comes back from an archive


@dataclass(frozen=True)
class Entry:
    path: PurePosixPath  # relative to the state folder
    mode: int
    data: bytes | None  # None for a directory

    @property
    def is_dir(self) -> bool:
        return self.data is None


@dataclass(frozen=True)
class Contents:
    entries: list[Entry]  # parents before children
    audit_key: bytes | None
    manifest: dict[str, Any]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_state(state: Path, paths: list[PurePosixPath]) -> list[Entry]:
    out = []
    for rel in paths:
        path = state / rel
        mode = stat.S_IMODE(path.lstat().st_mode) & _MODE_BITS
        out.append(Entry(rel, mode, None if path.is_dir() else path.read_bytes()))
    return out


def _add(tar: tarfile.TarFile, name: str, mode: int, data: bytes | None, when: int) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime, info.uname, info.gname = mode, when, "", ""
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def pack(entries: list[Entry], audit_key: bytes | None, source: Path, left_out: list[str]) -> bytes:
    """The gzip'd tar of `entries`, its manifest first."""
    now = datetime.now(UTC)
    manifest = {
        "format": FORMAT,
        "created": now.isoformat(timespec="seconds"),
        "source": str(source),
        "left_out": left_out,
        "audit_key": audit_key is not None,
        "entries": [
            {
                "path": str(e.path),
                "type": "dir" if e.is_dir else "file",
                "mode": e.mode,
                **({} if e.data is None else {"sha256": _sha(e.data)}),
            }
            for e in entries
        ],
    }
    raw = io.BytesIO()
    stamp = int(now.timestamp())
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, MANIFEST, 0o600, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode(), stamp)
        for e in entries:
            _add(tar, f"{STATE}/{e.path}", e.mode, e.data, stamp)
        if audit_key is not None:
            _add(tar, AUDIT_KEY, 0o600, audit_key, stamp)
    return gzip.compress(raw.getvalue(), mtime=0)


def _member_path(name: str, where: Path) -> PurePosixPath:
    """A member's path, refused unless it is plain and relative: no absolute path, no `..`, no
    `.` parts or empty parts a later join could reinterpret."""
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or any(part in ("..", ".", "") for part in name.rstrip("/").split("/"))
    ):
        raise StateArchiveError(
            f"{where}: member {name!r} would escape the state folder; nothing was written",
            ["the archive was not written by `installer state export`: do not use it"],
        )
    return path


def _kind(member: tarfile.TarInfo, where: Path) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    what = (
        "a symbolic link"
        if member.issym()
        else "a hard link"
        if member.islnk()
        else "a named pipe"
        if member.isfifo()
        else "a device"
        if member.isdev()
        else "a special file"
    )
    raise StateArchiveError(
        f"{where}: member {member.name!r} is {what}; a state archive holds only files and folders; nothing was written",
        ["the archive was not written by `installer state export`: do not use it"],
    )


def _members(tar: tarfile.TarFile, where: Path) -> dict[str, tuple[str, int, bytes | None]]:
    """Each member by its path: (kind, mode, bytes), checked one by one, read into memory."""
    files: dict[str, tuple[str, int, bytes | None]] = {}
    for m in tar.getmembers():
        path = _member_path(m.name, where)
        kind = _kind(m, where)
        key = str(path)
        if key in files:
            raise StateArchiveError(f"{where}: member {key!r} appears twice; nothing was written")
        data = None
        if kind == "file":
            fh = tar.extractfile(m)
            assert fh is not None  # a regular file always has one
            data = fh.read()
        files[key] = (kind, m.mode & _MODE_BITS, data)
    return files


def unpack(plain: bytes, where: Path) -> Contents:
    """Every member checked and held in memory, matched against the manifest; nothing is written."""
    try:
        raw = gzip.decompress(plain)
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            files = _members(tar, where)
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise StateArchiveError(f"{where} decrypts, but what is inside is no state archive: {exc}") from exc
    return _rest(files, where)


def _rest(files: dict[str, tuple[str, int, bytes | None]], where: Path) -> Contents:
    """The manifest read, and every member matched against it: none missing, none extra."""
    try:
        manifest = json.loads(files.pop(MANIFEST)[2] or b"")
    except (KeyError, ValueError) as exc:
        raise StateArchiveError(f"{where} has no readable {MANIFEST}: not a state archive") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StateArchiveError(
            f"{where} is in a format this installer does not read "
            f"({manifest.get('format') if isinstance(manifest, dict) else '?'})",
            ["import it with the installer version that exported it, or a newer one"],
        )
    audit_key = files.pop(AUDIT_KEY)[2] if AUDIT_KEY in files else None
    if (audit_key is not None) != bool(manifest.get("audit_key")):
        raise StateArchiveError(
            f"{where}: the audit key is {'there' if audit_key else 'missing'}, the manifest "
            "says otherwise; nothing was written"
        )
    entries: list[Entry] = []
    for item in manifest.get("entries", []):
        name = f"{STATE}/{item['path']}"
        rel = _member_path(str(item["path"]), where)
        if name not in files:
            raise StateArchiveError(
                f"{where}: {item['path']} is in the manifest but not in the archive; nothing was written"
            )
        kind, mode, data = files.pop(name)
        if kind != item["type"] or mode != item["mode"] or (data is not None and _sha(data) != item.get("sha256")):
            raise StateArchiveError(
                f"{where}: {item['path']} differs from the manifest (type, mode or sha256); nothing was written"
            )
        if rel.parent != PurePosixPath(".") and rel.parent not in {e.path for e in entries if e.is_dir}:
            raise StateArchiveError(f"{where}: {item['path']} comes before its folder; nothing was written")
        entries.append(Entry(rel, mode, data))
    if files:
        raise StateArchiveError(
            f"{where}: members the manifest does not list: {', '.join(sorted(files))}; nothing was written"
        )
    return Contents(entries, audit_key, manifest)
