"""`installer state import`: an archive checked whole, written beside the target, renamed in.

Nothing is written before the archive has decrypted (age authenticates every byte), every
member has passed archive.unpack's checks, and the target and the audit key have been judged:
the target is missing or empty, or holds exactly this state (then nothing is done), or holds
other state, which only --force replaces (the old folder is kept aside, renamed). The new
folder is written under a temporary name in the same parent, with each entry's mode, and
renamed into place, so the target is never half-restored. Then the import is appended to the
restored audit trail, which writes the trail's checkpoint for its new path.
"""

import json
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from installer.base import paths
from installer.base.files import atomic_write
from installer.state import audit
from installer.state_archive import StateArchiveError, archive, contents


@dataclass(frozen=True)
class Restored:
    state: Path
    files: int
    unchanged: bool  # the target already held exactly this state
    replaced: Path | None  # where the state it replaced (--force) was moved
    audit_key: Path | None  # where the trail's key was written, if it was


def _differences(target: Path, wanted: list[archive.Entry]) -> list[str]:
    """How the target's kept entries differ from the archive's (none: the same state), changes first."""
    have, _unknown = contents.walk(target)
    want = {e.path: e for e in wanted}
    out = []
    for p in have:
        e = want.get(p)
        if e is None:
            continue
        path = target / p
        data = None if e.data is None else path.read_bytes()
        # The trail grows by appends (this import's own entry among them): a trail that begins
        # with the archive's is the same trail.
        same = data == e.data or (str(p) == audit.FILE_NAME and data is not None and data.startswith(e.data or b"\0"))
        if (os.lstat(path).st_mode & 0o777) != e.mode or not same:
            out.append(f"{p}: differs")
    out += [f"{p}: not in the archive" for p in have if p not in want]
    return out + [f"{p}: not in the state folder" for p in want if p not in set(have)]


def _sealing_key_ids(entries: list[archive.Entry]) -> set[str]:
    trail = next((e for e in entries if str(e.path) == audit.FILE_NAME), None)
    ids: set[str] = set()
    for line in (trail.data or b"").splitlines() if trail else []:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("key_id"), str):
            ids.add(entry["key_id"])
    return ids


def _judge_audit_key(got: archive.Contents) -> bytes | None:
    """The key to write here (None: this machine's own serves, or the trail is unkeyed). Refuses,
    before anything is written, a machine whose key is not the one that sealed the trail: its
    entries could not be verified, and the installer never replaces a machine's key (other state
    folders' trails hang on it)."""
    needed = _sealing_key_ids(got.entries)
    if not needed:
        return None
    path = audit.key_file()
    local = path.read_bytes() if path.is_file() else None
    if got.audit_key is not None and local is not None and local.strip() != got.audit_key.strip():
        raise StateArchiveError(
            f"this machine's audit key {path} is not the one that sealed the archive's audit trail; nothing was "
            "written",
            [
                f"set {audit.KEY_ENV} to a file that does not exist yet (outside the state folder) and import again: "
                "the trail's key is written there; keep that variable set for this deployment's commands"
            ],
        )
    key = got.audit_key if got.audit_key is not None else local
    if key is None:
        raise StateArchiveError(
            "the archive's audit trail is sealed, but neither the archive nor this machine "
            "holds its key; nothing was written",
            [f"copy the key from the old machine and set {audit.KEY_ENV} to it"],
        )
    try:
        key_id = audit.key_id(bytes.fromhex(key.decode().strip()))
    except ValueError as exc:
        raise StateArchiveError("the archive's audit key is not a key; nothing was written") from exc
    if key_id not in needed:
        raise StateArchiveError(
            f"the audit key {'in the archive' if got.audit_key else path} did not seal the "
            "archive's audit trail; nothing was written",
            [f"set {audit.KEY_ENV} to the key of the machine that exported it"],
        )
    return got.audit_key if local is None else None


def _write_tree(root: Path, entries: list[archive.Entry]) -> None:
    root.mkdir(mode=0o700)
    root.chmod(0o700)
    for e in entries:
        path = root.joinpath(*PurePosixPath(e.path).parts)
        if e.is_dir:
            path.mkdir(mode=0o700)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, e.data or b"")
                os.fsync(fd)
            finally:
                os.close(fd)
        path.chmod(e.mode)  # exactly the archived mode: the umask applies to mkdir and open


def _aside(target: Path) -> Path:
    """Where a replaced state folder is kept: beside it, dated, never over an earlier one."""
    return (
        target.parent / f".{target.name.lstrip('.')}.replaced-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    )


def restore(blob: bytes, where: Path, decrypt: Callable[[bytes], bytes], force: bool, argv: list[str]) -> Restored:
    got = archive.unpack(decrypt(blob), where)
    target, _why = paths.resolve_state_dir()
    target = target.absolute()
    checkpoint = audit.checkpoint_file(target)
    occupied = target.is_dir() and any(target.iterdir())
    if occupied and not _differences(target, got.entries):
        return Restored(target, 0, True, None, None)
    if (occupied or checkpoint.exists()) and not force:
        holds_state = occupied and bool(contents.walk(target)[0])
        found = _differences(target, got.entries) if holds_state else []
        if found:
            what = f"holds other state ({'; '.join(found[:3])}{'...' if len(found) > 3 else ''})"
        elif occupied:
            what = f"is not empty (it holds {', '.join(sorted(p.name for p in target.iterdir()))})"
        else:
            what = f"has an audit checkpoint {checkpoint} of another trail"
        raise StateArchiveError(
            f"the state folder {target} {what}; nothing was written",
            [
                "import into an empty --state-dir, or pass --force to replace it "
                "(the old folder is kept beside it, renamed)"
            ],
        )
    key = _judge_audit_key(got)
    tmp = target.parent / f".{target.name.lstrip('.')}.import-{secrets.token_hex(4)}"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write_tree(tmp, got.entries)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StateArchiveError(f"cannot write beside {target}: {exc.strerror or exc}; nothing was restored") from exc
    written_key = None
    if key is not None:
        written_key = audit.key_file()
        atomic_write(written_key, key, 0o600)  # made with its folder 0700, as audit._create_key does
        written_key.parent.chmod(0o700)
    replaced = None
    if target.exists():
        if occupied:
            replaced = _aside(target)
            target.rename(replaced)
        else:
            target.rmdir()
    if checkpoint.exists():
        # The old trail's checkpoint goes with the old trail, so the restored trail starts its own.
        holder = replaced or _aside(target)
        holder.mkdir(mode=0o700, exist_ok=True)
        checkpoint.rename(holder / "audit-checkpoint.json")
        replaced = holder
    tmp.rename(target)
    audit.append(audit.new_entry("state import", argv, None, None))
    return Restored(target, sum(not e.is_dir for e in got.entries), False, replaced, written_key)
