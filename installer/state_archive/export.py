"""`installer state export`: the state folder's kept entries and the audit key, encrypted."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from installer.base import paths
from installer.base.files import atomic_write
from installer.state import audit
from installer.state_archive import StateArchiveError, archive, contents


@dataclass(frozen=True)
class Exported:
    path: Path
    state: Path
    files: int
    folders: int
    audit_key: bool
    left_out: list[str]  # "name: why" for what the state folder holds and the archive does not
    unknown: list[str]  # names this installer does not write (left out too)


def _audit_key(state: Path) -> bytes | None:
    """The key that seals this state's trail, when there is a trail and this machine has the key.
    It lives outside the state folder on purpose (installer/state/audit.py); the archive carries it so
    the trail can still be verified and extended on the new machine."""
    key = audit.key_file()
    if not (state / audit.FILE_NAME).is_file() or not key.is_file():
        return None
    try:
        return key.read_bytes()
    except OSError as exc:
        raise StateArchiveError(
            f"cannot read the audit key {key}: {exc.strerror or exc}",
            ["run as the user who owns it, or set PLI_AUDIT_KEY_FILE"],
        ) from exc


def export(out: Path, encrypt: Callable[[bytes], bytes]) -> Exported:
    """Write the encrypted archive to `out` (0600, whole or not at all)."""
    state, why = paths.resolve_state_dir()
    if not state.is_dir():
        raise StateArchiveError(
            f"no state folder at {state} (chosen by {why}): nothing to export",
            ["pass the deployment's --inventory, or --state-dir"],
        )
    out = Path(out).absolute()
    if out.is_relative_to(state.resolve()):
        raise StateArchiveError(
            f"{out} is inside the state folder {state}",
            ["write the archive somewhere else: it is meant to leave this machine"],
        )
    kept, unknown = contents.walk(state)
    if not kept:
        raise StateArchiveError(f"the state folder {state} (chosen by {why}) holds no deployment state to export")
    entries = archive.read_state(state, kept)
    key = _audit_key(state)
    tops = sorted(p.name for p in state.iterdir())
    left_out = [
        f"{t}: {contents.LEFT_OUT.get(t, 'a lock, made again on use')}"
        for t in tops
        if contents.classify(t) == "left out"
    ]
    if any((state / "terraform").glob("*/.terraform")):
        left_out.append("terraform/*/.terraform: Terraform's provider plugins, fetched again by `terraform init`")
    blob = encrypt(
        archive.pack(entries, key, state, left_out + [f"{u}: not written by this installer" for u in unknown])
    )
    atomic_write(out, blob, 0o600)
    return Exported(
        out,
        state,
        sum(not e.is_dir for e in entries),
        sum(e.is_dir for e in entries),
        key is not None,
        left_out,
        unknown,
    )
