"""The audit trail: one JSON line per action that changed the deployment, in the state folder.

The chain is keyed. Each entry carries `prev`, the previous entry's `mac` (GENESIS for the
first), `key_id`, which key sealed it, and `mac`, HMAC-SHA256 with the audit key over its own
canonical bytes (sorted keys, no spaces, without `mac`). An edited, inserted, removed or
reordered entry no longer matches its mac or its successor's `prev`, and without the key nobody
can compute new macs for a rewritten chain.

The key lives outside the state folder (`key_file()`: $PLI_AUDIT_KEY_FILE, else
/var/lib/private-llm-installer/audit/key for root, else $XDG_CONFIG_HOME/private-llm-installer/
audit/key), 0600 in a 0700 folder. Whoever can write the state folder but not that folder (another
operator, a shared or synced state, a restored copy) cannot rebuild the chain. Beside the key,
`checkpoints/<sha256 of the state folder's path>.json` holds the entry count and the last mac of
that state folder's trail, signed with the key and rewritten under the trail's lock on every
append: a cut tail, a deleted trail, or a chain rebuilt with another key or as unkeyed entries no
longer matches it. An append that finds the trail out of step with its checkpoint refuses, so the
next command cannot paper over the evidence; only where the whole state folder is gone (no trail
and no deployment state: removed on purpose, or a fresh clone in its place) does it start a new
trail, whose first entry records, sealed, the count and last mac of the one that was lost.

Entries written before the key (`hash`: unkeyed sha256, and `prev`) are accepted only at the
start of the trail. The first keyed entry's `prev` is the last of their hashes and its mac covers
it, so from then on none of them can change unnoticed ("sealed"); what they said before that seal
was written cannot be authenticated, and `verify` says so.

Limits: the user who runs the installer can read the key, so that user and root can still
rewrite everything here. Each append is also sent to syslog/journald when /dev/log exists: that
copy, forwarded off the machine, is the defence against them.

Appends hold an exclusive lock on the trail, so two commands at once cannot interleave lines or
both chain to the same entry.
"""

import fcntl
import hashlib
import hmac
import json
import os
import pwd
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from installer.base import paths
from installer.base.errors import InstallerError
from installer.base.files import write_private
from installer.base.hashing import sha256_file

FILE_NAME = "audit.jsonl"
GENESIS = "0" * 64
REDACTED = "<redacted>"
STARTED = "started"
KEY_ENV = "PLI_AUDIT_KEY_FILE"
SYSLOG_ENV = "PLI_AUDIT_SYSLOG"  # "0" keeps the entries' macs out of syslog
ROOT_KEY_FILE = Path("/var/lib/private-llm-installer/audit/key")
LOGINUID_FILE = Path("/proc/self/loginuid")
SYSLOG_SOCKET = Path("/dev/log")
_LOGINUID_UNSET = 4294967295  # (uid_t)-1: a process no login session started (cron, containers)
# installer.secrets.keys.PROBE_KEY_NAME (a sibling module, not importable from here): `up --check` makes
# this key, so a keys.json holding only it is no sign that an audited command ever ran.
_PROBE_KEY_NAME = "installer-probe"
# Option names whose value is a secret whatever it looks like; `keys create --name` is not one.
_SECRET_OPTION = re.compile(r"pass(word|phrase)?|secret|token|api[-_]?key|credential|private", re.I)
# Values that are secrets by their look: our API keys, bearer tokens, PEM private keys.
_SECRET_VALUE = re.compile(r"sk-[A-Za-z0-9_-]{8,}|Bearer\s+\S+|-----BEGIN [A-Z ]*PRIVATE KEY-----", re.I)


class AuditError(InstallerError):
    """The audit trail could not be written or read."""


@dataclass(frozen=True)
class Verdict:
    entries: int
    last_mac: str
    legacy: int = 0  # unkeyed entries at the start of the trail, written before the key existed
    broken_line: int | None = None  # 1-based line number of the first entry that fails, if one does
    why: str = ""  # empty when the trail is intact
    fix: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # true and worth saying, but not a failure
    checkpoint: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.why


# --- where things live ---------------------------------------------------------------------


def log_path(create: bool = False) -> Path:
    """The current state folder's trail. Only a writer creates the folder: reading or verifying
    must not leave an empty ./.installer behind."""
    folder = paths.state_dir() if create else paths.resolve_state_dir()[0]
    return folder / FILE_NAME


def _running_as_root() -> bool:
    return os.geteuid() == 0


def key_file() -> Path:
    """The audit key: $PLI_AUDIT_KEY_FILE, else a system path for root (the usual way the
    installer runs), else the user's XDG config folder. Never the state folder (see module doc)."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser().absolute()
    if _running_as_root():
        return ROOT_KEY_FILE
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "private-llm-installer" / "audit" / "key"


def checkpoint_file(state: Path) -> Path:
    """The checkpoint of one state folder, beside the key, named by the folder's resolved path."""
    name = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:32]
    return key_file().parent / "checkpoints" / f"{name}.json"


def _require_outside(key: Path, state: Path) -> None:
    if key.resolve().is_relative_to(state.resolve()):
        raise AuditError(
            f"the audit key {key} is inside the state folder {state}: whoever can write the state "
            "could rewrite the trail and its key together",
            [f"unset {KEY_ENV}, or point it at a file outside {state}"],
        )


# --- entries -------------------------------------------------------------------------------


def canonical(entry: Mapping[str, Any]) -> bytes:
    """The bytes an entry's seal covers: everything but the seal (`mac`, or a legacy `hash`)."""
    body = {k: v for k, v in entry.items() if k not in ("hash", "mac")}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def entry_hash(entry: Mapping[str, Any]) -> str:
    """A legacy entry's seal: unkeyed sha256, which anyone can recompute."""
    return hashlib.sha256(canonical(entry)).hexdigest()


def entry_mac(key: bytes, entry: Mapping[str, Any]) -> str:
    return hmac.new(key, canonical(entry), hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """Names a key without revealing it, so `verify` can tell "another key" from "edited"."""
    return hashlib.sha256(b"private-llm-installer audit key id\0" + key).hexdigest()[:16]


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


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no passwd entry (containers)
        return str(uid)


def _login_uid() -> int | None:
    """The uid that logged in, which the kernel keeps across sudo and su (and the user cannot
    set, unlike $SUDO_USER); None when no login session started this process."""
    try:
        uid = int(LOGINUID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None
    return None if uid == _LOGINUID_UNSET else uid


def _users() -> tuple[str, str]:
    """(who: the login user, else the real uid's; as whom the installer runs: the effective uid's)."""
    login = _login_uid()
    return _user_name(os.getuid() if login is None else login), _user_name(os.geteuid())


def new_run_id() -> str:
    """Pairs a command's start entry with its end entry."""
    return secrets.token_hex(8)


def new_entry(
    command: str, argv: Iterable[str], inventory: Path | None, error: BaseException | str | None,
    run: str | None = None, started: bool = False,
) -> dict[str, Any]:
    """An entry without its chain fields: who ran what on which inventory, and how it ended (or,
    with `started`, that it began: a command killed mid-way leaves at least that)."""
    user, run_as = _users()
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
        "run_as": run_as,
        "run": run,
        "command": command,
        "argv": redact_argv(argv),
        "inventory": str(Path(os.path.abspath(inventory))) if inventory is not None else None,
        "inventory_sha256": digest,
        "result": STARTED if started else ("ok" if error is None else "failed"),
        "error": first_line or None,
    }


# --- the key ---------------------------------------------------------------------------------


def _read_key(path: Path) -> bytes | None:
    """The key, or None if there is none yet. A key others may read is refused: with it they
    could rewrite the trail unnoticed."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise AuditError(
                f"the audit key {path} is open to other users (mode {mode:o}): whoever read it could have "
                "rewritten the trail unnoticed",
                [f"chmod 600 {path}; treat the trail as unauthenticated since the mode changed"],
            )
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditError(
            f"cannot read the audit key {path}: {exc.strerror or exc}",
            [f"run the installer as the user who owns the key, or set {KEY_ENV} to that user's key file"],
        ) from exc
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 32:
        raise AuditError(f"{path} is not an audit key (64 hex digits expected)",
                         ["restore the key from a backup (mode 0600)"])
    return key


def _create_key(path: Path) -> bytes:
    """A new random key, 0600 in a 0700 folder. Written whole to a temporary file and linked into
    place, so of two first appends at once one key wins and nobody reads half a key."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (secrets.token_hex(32) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        finally:
            tmp.unlink()
    except OSError as exc:
        raise AuditError(
            f"cannot create the audit key {path}: {exc.strerror or exc}",
            [f"set {KEY_ENV} to a file in a folder you may write, outside the state folder"],
        ) from exc
    key = _read_key(path)
    assert key is not None  # just linked, or linked by the winner of the race
    return key


def _key_for_append(key_path: Path, trail: Path, links: "_Links") -> bytes:
    """The key, made on first use, but never silently replaced: a missing key with a sealed trail
    or a checkpoint means it was lost or removed, and a new one would break every old seal."""
    key = _read_key(key_path)
    if key is not None:
        return key
    checkpoint = checkpoint_file(trail.parent)
    if links.keyed or checkpoint.exists():
        raise AuditError(
            f"the audit key {key_path} is missing, but the trail {trail} is already sealed with it",
            [f"restore {key_path} from a backup (mode 0600), or set {KEY_ENV} to where it is",
             f"to start a new trail on purpose: move {trail} aside (keep it) and remove {checkpoint}"],
        )
    return _create_key(key_path)


# --- the checkpoint --------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    entries: int
    last_mac: str


def _write_checkpoint(key: bytes, state: Path, entries: int, last_mac: str) -> None:
    path = checkpoint_file(state)
    body: dict[str, Any] = {
        "state_dir": str(state.resolve()), "entries": entries, "last_mac": last_mac, "key_id": key_id(key),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    body["mac"] = entry_mac(key, body)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, json.dumps(body, sort_keys=True) + "\n")
    except OSError as exc:
        raise AuditError(
            f"cannot write the audit checkpoint {path}: {exc.strerror or exc}",
            [f"the entry itself is in the trail; let this user write {path.parent}, or set {KEY_ENV}"],
        ) from exc


def _read_checkpoint(key: bytes | None, state: Path) -> Checkpoint | None:
    """The state folder's checkpoint, or None if it has none; one that is damaged, forged, or
    belongs to another folder is an error, not None (that would hide a cut)."""
    path = checkpoint_file(state)
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise AuditError(f"cannot read the audit checkpoint {path}: {exc}",
                         [f"restore {path.parent} from a backup"]) from exc
    if key is None:
        raise AuditError(
            f"the audit checkpoint {path} exists, but the key {key_file()} that signed it is missing",
            [f"restore {key_file()} from a backup (mode 0600), or set {KEY_ENV} to where it is"],
        )
    if not isinstance(body, dict) or not hmac.compare_digest(str(body.get("mac")), entry_mac(key, body)):
        raise AuditError(
            f"the audit checkpoint {path} is not signed by the audit key {key_file()}: it was edited, "
            "or the key replaced",
            [f"restore {path} and the key from a backup"],
        )
    if body.get("state_dir") != str(state.resolve()):
        raise AuditError(
            f"the audit checkpoint {path} belongs to {body.get('state_dir')}, not {state.resolve()}: it was "
            "copied over this folder's",
            [f"restore {path} from a backup"],
        )
    return Checkpoint(path, int(body["entries"]), str(body["last_mac"]))


def _checkpoint_problem(cp: Checkpoint, links: list[str], trail: Path) -> str:
    """Why the trail does not hold what its checkpoint recorded ("" when it does). The trail may
    be ahead: a run stopped between writing its entry and the checkpoint."""
    if cp.entries > len(links):
        if not links:  # an append has made it again by now, empty
            what = "missing" if not trail.exists() else "empty"
            return (f"the trail is {what}, but the checkpoint {cp.path} says it held {cp.entries} entries: "
                    "it was deleted")
        return (f"the checkpoint {cp.path} says the trail held {cp.entries} entries, it holds {len(links)}: "
                "entries were cut off its end")
    if cp.entries and not hmac.compare_digest(links[cp.entries - 1], cp.last_mac):
        return (f"entry {cp.entries} is not the one the checkpoint {cp.path} recorded (mac {cp.last_mac}): "
                "the trail was rewritten")
    return ""


def _restart_fix(trail: Path, checkpoint: Path) -> list[str]:
    return [
        "keep what is left of the trail as evidence; if this was done on purpose (the state folder restored "
        f"from an older backup, the trail removed), start a new trail: move {trail} aside if it is there, "
        f"and remove {checkpoint}",
    ]


# --- appending -------------------------------------------------------------------------------


@dataclass
class _Links:
    """What an append needs from the lines already there: each line's seal, in order."""

    seals: list[str] = field(default_factory=list)
    keyed: int = 0


def _links(raw: bytes) -> _Links:
    links = _Links()
    for line in raw.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("mac"), str):
            links.seals.append(entry["mac"])
            links.keyed += 1
        elif isinstance(entry, dict) and isinstance(entry.get("hash"), str):
            links.seals.append(entry["hash"])
        else:
            # A damaged line still gets a successor; `verify` names the damage.
            links.seals.append(hashlib.sha256(line).hexdigest())
    return links


def _previous_trail(key: bytes, path: Path, links: _Links) -> dict[str, Any] | None:
    """Hold the trail against its checkpoint before appending, so the append cannot paper over a
    cut or a rewrite by moving the checkpoint. A trail out of step is refused, except one case:
    no trail and no deployment state, i.e. the whole state folder was removed (or a fresh clone
    sits where an old one was). Refusing would block every fresh start there; instead the new
    trail begins by recording, sealed, what the checkpoint knew of the lost one."""
    checkpoint = _read_checkpoint(key, path.parent)
    problem = _checkpoint_problem(checkpoint, links.seals, path) if checkpoint else ""
    if not checkpoint or not problem:
        return None
    if not links.seals and not deployment_state(path.parent):
        return {"entries": checkpoint.entries, "last_mac": checkpoint.last_mac}
    raise AuditError(f"refusing to append to the audit trail {path}: {problem}", [
        "nothing was changed; `installer audit --verify` says the same", *_restart_fix(path, checkpoint.path)])


def _open_trail(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise AuditError(
            f"cannot open the audit trail {path}: {exc.strerror or exc}",
            ["pass `installer --state-dir DIR ...` with a folder you may write to"],
        ) from exc


def _read_fd(fd: int) -> bytes:
    raw = b""
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        raw += chunk
    return raw


def append(entry: Mapping[str, Any], path: Path | None = None) -> dict[str, Any]:
    """Seal `entry` with the key, chain it to the last one, append it and move the checkpoint,
    holding the trail's lock throughout."""
    path = path or log_path(create=True)
    state = path.parent
    key_path = key_file()
    _require_outside(key_path, state)
    fd = _open_trail(path)
    try:
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = _read_fd(fd)
        links = _links(raw)
        key = _key_for_append(key_path, path, links)
        previous = _previous_trail(key, path, links)
        if raw and not raw.endswith(b"\n"):
            os.write(fd, b"\n")  # a torn line ends where it is; the new entry gets its own
        sealed = {**entry, "key_id": key_id(key), "prev": links.seals[-1] if links.seals else GENESIS}
        if previous:
            sealed["previous_trail"] = previous
        sealed["mac"] = entry_mac(key, sealed)
        os.write(fd, (json.dumps(sealed, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n").encode())
        os.fsync(fd)
        _write_checkpoint(key, state, len(links.seals) + 1, sealed["mac"])
    except OSError as exc:  # a full disk, a lost mount: one line for the user, not a traceback
        raise AuditError(f"cannot write the audit trail {path}: {exc.strerror or exc}",
                         ["free space or fix the folder, then run the command again"]) from exc
    finally:
        os.close(fd)  # releases the lock
    _announce(state, len(links.seals) + 1, sealed)
    return sealed


def _announce(state: Path, number: int, entry: Mapping[str, Any]) -> None:
    """Best effort: the entry's mac to syslog/journald (authpriv), a copy the trail's writers
    cannot take back once it is forwarded. Never required, never fails a command."""
    if os.environ.get(SYSLOG_ENV) == "0" or not SYSLOG_SOCKET.exists():
        return
    try:
        import syslog

        syslog.openlog("private-llm-installer", syslog.LOG_PID, syslog.LOG_AUTHPRIV)
        syslog.syslog(syslog.LOG_INFO, (
            f"audit {state.resolve()} entry {number}: {entry.get('command')} {entry.get('result')} "
            f"by {entry.get('user')} mac {entry.get('mac')}"
        ))
    except (ImportError, OSError, ValueError):
        pass


# --- reading and verifying -------------------------------------------------------------------


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


def deployment_state(state: Path) -> list[str]:
    """What in the state folder only an audited command writes: revisions (up, upgrade,
    rollback, releases), user API keys (keys create), Terraform state (up on a cloud). Its
    presence with no trail means the trail was removed, or the state predates it."""
    found = [name for name in ("state.json", "revisions") if (state / name).exists()]
    if _has_user_keys(state / "keys.json"):
        found.append("keys.json")
    found += [str(p.relative_to(state)) for p in sorted(state.glob("terraform/*/terraform.tfstate"))]
    return found


def _has_user_keys(store: Path) -> bool:
    if not store.is_file():
        return False
    try:
        keys = json.loads(store.read_bytes()).get("keys", [])
        return any(k.get("name") != _PROBE_KEY_NAME for k in keys)
    except (OSError, ValueError, AttributeError, TypeError):
        return True  # a damaged key store is still deployment state


@dataclass
class _Walk:
    seals: list[str] = field(default_factory=list)
    legacy: int = 0
    broken_line: int | None = None
    why: str = ""
    fix: tuple[str, ...] = ()


def _seal_problem(entry: dict[str, Any], key: bytes | None, walk: _Walk) -> str:
    """Why this entry's own seal fails ("" when it holds)."""
    if "mac" in entry:
        if key is None:
            return f"it is sealed with the audit key (id {entry.get('key_id')}), but {key_file()} does not exist"
        if entry.get("key_id") != key_id(key):
            return (f"it was sealed with another key (id {entry.get('key_id')}; {key_file()} has id {key_id(key)}): "
                    "the entry was forged, or the key replaced")
        if not hmac.compare_digest(str(entry["mac"]), entry_mac(key, entry)):
            return "its content does not match its mac: the entry was edited, or forged without the key"
        return ""
    if "hash" in entry:
        if len(walk.seals) > walk.legacy:
            return ("an unkeyed (legacy) entry after keyed ones: this version writes only keyed entries, "
                    "so it was added by hand")
        if entry_hash(entry) != entry["hash"]:
            return "its content does not match its hash: the entry was edited"
        return ""
    return "not an audit entry (no mac or hash)"


def _chain_problem(number: int, walk: _Walk) -> str:
    if number == 1:
        return "it does not chain to the start: entries before it were removed"
    if walk.legacy == len(walk.seals):
        return (f"it does not chain to the legacy (unkeyed) entry before it: the {walk.legacy} legacy entries "
                "were changed after this entry sealed them, or entries removed, inserted or reordered here")
    return "it does not chain to the entry before it: an entry was removed, inserted or reordered here"


def _walk(lines: list[bytes], key: bytes | None) -> _Walk:
    """Check every line's seal and link; stop at the first that fails."""
    walk = _Walk()
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            walk.broken_line, walk.why = number, "not a JSON line (damaged or hand-edited)"
            return walk
        why = _seal_problem(entry, key, walk)
        if not why and entry.get("prev") != (walk.seals[-1] if walk.seals else GENESIS):
            why = _chain_problem(number, walk)
        if why:
            walk.broken_line, walk.why = number, why
            if "mac" in entry and key is None:
                walk.fix = (f"restore {key_file()} from a backup (mode 0600), or set {KEY_ENV} to where it is",)
            return walk
        if "mac" not in entry:
            walk.legacy += 1
        walk.seals.append(str(entry.get("mac") or entry["hash"]))
    return walk


def _first_previous_trail(lines: list[bytes]) -> dict[str, Any] | None:
    """What the first entry (sealed, so only an append wrote it) says of a trail lost before it."""
    if not lines:
        return None
    previous = json.loads(lines[0]).get("previous_trail")
    return previous if isinstance(previous, dict) else None


def _legacy_note(walk: _Walk, lines: list[bytes]) -> str:
    """The rule for entries written before the key, said where it applies."""
    n = walk.legacy
    if len(walk.seals) == n:
        return (f"{n} legacy unkeyed entries, cannot be authenticated: their sha256 chain is consistent, but "
                "anyone who could write the trail could have rebuilt it. The next audited command seals them "
                "(its mac covers their last hash)")
    sealed_at = json.loads(lines[n]).get("time", "?")
    return (f"{n} legacy unkeyed entries (lines 1-{n}), sealed by line {n + 1} ({sealed_at}): unchanged since then, "
            "but what they said before it cannot be authenticated")


def _notes(walk: _Walk, lines: list[bytes], checkpoint: Checkpoint | None) -> tuple[str, ...]:
    notes = [_legacy_note(walk, lines)] if walk.legacy else []
    if (previous := _first_previous_trail(lines)) is not None:
        notes.append(f"line 1 starts a new trail where one of {previous.get('entries')} entries (last mac "
                     f"{previous.get('last_mac')}) had been: that trail and the deployment state beside it were gone "
                     "when this entry was written (the state folder removed, or a fresh one made in its place)")
    if checkpoint is not None and checkpoint.entries < len(walk.seals):
        notes.append(f"{len(walk.seals) - checkpoint.entries} entries after the checkpoint: a run stopped between "
                     "writing its entry and the checkpoint; the next audited command moves it")
    return tuple(notes)


def _without_checkpoint(walk: _Walk, trail: Path, checkpoint: Path) -> tuple[str, tuple[str, ...]]:
    """With no checkpoint, what the folder itself says: keyed entries mean one was written, and
    deployment state means an audited command ran. ("", ()) when neither speaks against it."""
    if len(walk.seals) > walk.legacy:
        return (f"the trail has keyed entries but no checkpoint ({checkpoint}): entries cut off its end could not "
                "be noticed", (
                    "if the state folder was moved or copied here, its checkpoint is under the old path's name; "
                    "compare the count and last mac with a copy; the next audited command writes a new checkpoint",
                    f"otherwise restore {checkpoint} from a backup"))
    if not walk.seals and (found := deployment_state(trail.parent)):
        return (f"there is no audit trail, but the state folder {trail.parent} holds deployment state "
                f"({', '.join(found)}): the trail was deleted, or this state predates it", (
                    f"restore {trail} from a backup",
                    "if this state predates the audit trail, the next audited command (e.g. `installer up`) "
                    "starts one"))
    return "", ()


def verify(path: Path | None = None) -> Verdict:
    """Walk the chain with the key, then hold the result against the checkpoint (or, with none,
    against the deployment state the folder holds). The first problem found is the verdict."""
    path = path or log_path()
    state = path.parent
    try:
        key_path = key_file()
        _require_outside(key_path, state)
        key = _read_key(key_path)
        # The checkpoint before the trail: an append between the two reads leaves the trail
        # ahead of it (said, not failed), never behind (a false "cut").
        checkpoint = _read_checkpoint(key, state)
        lines = path.read_bytes().splitlines() if path.is_file() else []
    except (AuditError, OSError) as exc:
        fix = tuple(exc.details) if isinstance(exc, AuditError) else ()
        return Verdict(0, GENESIS, why=str(exc), fix=fix)
    walk = _walk(lines, key)
    cp_path = checkpoint_file(state)
    verdict = Verdict(len(walk.seals), walk.seals[-1] if walk.seals else GENESIS, walk.legacy, checkpoint=cp_path)
    if walk.why:
        return replace(verdict, broken_line=walk.broken_line, why=walk.why, fix=walk.fix)
    if checkpoint is not None:
        why = _checkpoint_problem(checkpoint, walk.seals, path)
        fix = tuple(_restart_fix(path, checkpoint.path)) if why else ()
    else:
        why, fix = _without_checkpoint(walk, path, cp_path)
    if why:
        return replace(verdict, why=why, fix=fix)
    return replace(verdict, notes=_notes(walk, lines, checkpoint))
