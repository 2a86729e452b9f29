"""The audit trail: one JSON line per action that changed the deployment, in the state folder.

Each entry carries `hash`, the sha256 of its own canonical bytes (sorted keys, no spaces, without
`hash`), and `prev`, the previous entry's hash (the first one's is GENESIS). An edited entry no
longer matches its hash; a removed, inserted or reordered one breaks the next entry's `prev`.
Only a cut tail leaves no trace inside the file, so `verify` reports the count and the last hash
for comparison with a copy kept elsewhere. Appends hold an exclusive lock on the file, so two
commands at once cannot interleave lines or both chain to the same entry.
"""

import fcntl
import hashlib
import json
import os
import pwd
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from installer import paths
from installer.errors import InstallerError
from installer.hashing import sha256_file

FILE_NAME = "audit.jsonl"
GENESIS = "0" * 64
REDACTED = "<redacted>"
# Option names whose value is a secret whatever it looks like; `keys create --name` is not one.
_SECRET_OPTION = re.compile(r"pass(word|phrase)?|secret|token|api[-_]?key|credential|private", re.I)
# Values that are secrets by their look: our API keys, bearer tokens, PEM private keys.
_SECRET_VALUE = re.compile(r"sk-[A-Za-z0-9_-]{8,}|Bearer\s+\S+|-----BEGIN [A-Z ]*PRIVATE KEY-----", re.I)


class AuditError(InstallerError):
    """The audit trail could not be written or read."""


@dataclass(frozen=True)
class Verdict:
    entries: int
    last_hash: str
    broken_line: int | None = None  # 1-based line number of the first entry that fails
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.broken_line is None


def log_path() -> Path:
    return paths.state_dir() / FILE_NAME


def canonical(entry: Mapping[str, Any]) -> bytes:
    """The bytes an entry's hash covers: everything but the hash itself, in one spelling."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def entry_hash(entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(entry)).hexdigest()


def redact_text(text: str) -> str:
    return _SECRET_VALUE.sub(REDACTED, text)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The argv with every secret value replaced: after a secret-named option, `--opt=secret`,
    and anything that looks like a key or token."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        secret_name = name.startswith("-") and bool(_SECRET_OPTION.search(name))
        if secret_name and eq:
            out.append(f"{name}={REDACTED}")
        else:
            out.append(redact_text(arg))
            hide_next = secret_name and not eq
    return out


def _users() -> tuple[str, str | None]:
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no passwd entry (containers)
        user = str(os.geteuid())
    return user, os.environ.get("SUDO_USER") or None


def new_entry(
    command: str, argv: Iterable[str], inventory: Path | None, error: BaseException | str | None,
) -> dict[str, Any]:
    """An entry without its chain fields: who ran what on which inventory, and how it ended."""
    user, sudo_user = _users()
    digest = None
    if inventory is not None:
        try:
            digest = sha256_file(Path(inventory))
        except OSError:
            digest = None  # removed or unreadable by now: the path still says which one
    first_line = ""
    if error is not None:
        text = error if isinstance(error, str) else (str(error) or type(error).__name__)
        first_line = redact_text(text.strip().splitlines()[0] if text.strip() else type(error).__name__)
    return {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "user": user,
        "sudo_user": sudo_user,
        "command": command,
        "argv": redact_argv(argv),
        "inventory": str(Path(os.path.abspath(inventory))) if inventory is not None else None,
        "inventory_sha256": digest,
        "result": "ok" if error is None else "failed",
        "error": first_line or None,
    }


def _last_hash(raw: bytes) -> str:
    lines = raw.splitlines()
    if not lines:
        return GENESIS
    try:
        return str(json.loads(lines[-1])["hash"])
    except (ValueError, KeyError, TypeError):
        # A damaged last line still gets a successor; `verify` names the damage.
        return hashlib.sha256(lines[-1]).hexdigest()


def append(entry: Mapping[str, Any], path: Path | None = None) -> dict[str, Any]:
    """Chain `entry` to the last one and append it, holding the file's lock throughout."""
    path = path or log_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise AuditError(
            f"cannot open the audit trail {path}: {exc.strerror or exc}",
            ["pass `installer --state-dir DIR ...` with a folder you may write to"],
        ) from exc
    try:
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = b""
        os.lseek(fd, 0, os.SEEK_SET)
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
        if raw and not raw.endswith(b"\n"):
            raw += b"\n"
            os.write(fd, b"\n")  # a torn line ends where it is; the new entry gets its own
        chained = {**entry, "prev": _last_hash(raw)}
        chained["hash"] = entry_hash(chained)
        line = json.dumps(chained, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock
    return chained


def read(path: Path | None = None) -> list[dict[str, Any]]:
    """Every entry that parses, oldest first (`verify` judges the rest)."""
    path = path or log_path()
    if not path.is_file():
        return []
    entries = []
    for line in path.read_bytes().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def verify(path: Path | None = None) -> Verdict:
    """Walk the chain; the first line that fails stops the walk and is named with the reason."""
    path = path or log_path()
    prev = GENESIS
    count = 0
    if not path.is_file():
        return Verdict(0, GENESIS)
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            return Verdict(count, prev, number, "not a JSON line (damaged or hand-edited)")
        if not isinstance(entry, dict) or "hash" not in entry or "prev" not in entry:
            return Verdict(count, prev, number, "not an audit entry (no hash or prev)")
        if entry_hash(entry) != entry["hash"]:
            return Verdict(count, prev, number, "its content does not match its hash: the entry was edited")
        if entry["prev"] != prev:
            why = (
                "it does not chain to the entry before it: an entry was removed, inserted or reordered here"
                if number > 1 else "it does not chain to the start: entries before it were removed"
            )
            return Verdict(count, prev, number, why)
        prev = entry["hash"]
        count += 1
    return Verdict(count, prev)
