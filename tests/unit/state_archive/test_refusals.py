"""What `installer state import` refuses, each before it writes anything: a changed archive, a
member that could land outside the state folder, a folder holding other state (unless --force),
and an audit key that did not seal the trail."""

import gzip
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pyrage
import pytest

from installer.state_archive import StateArchiveError, archive
from tests.support.state_machines import Machine, import_with, invoke, tree


def _nothing_written(machine: Machine) -> None:
    parent = machine.state.parent
    assert not parent.exists() or list(parent.iterdir()) == [], list(parent.iterdir())
    assert not machine.audit_key.exists()


@pytest.mark.parametrize("where", ["payload", "header-mac", "truncated"])
def test_a_changed_archive_is_refused_and_nothing_is_written(
    exported: Path, new: Machine, on: Callable[[Machine], None], age_identity: tuple[str, Path], where: str
) -> None:
    out = exported
    blob = bytearray(out.read_bytes())
    if where == "payload":
        blob[-20] ^= 0x01
    elif where == "header-mac":
        mac = blob.index(b"\n--- ") + 6
        blob[mac] = ord("A") if blob[mac] != ord("A") else ord("B")
    else:
        del blob[-100:]
    out.write_bytes(bytes(blob))
    on(new)
    with pytest.raises(StateArchiveError, match=r"was changed or damaged.*nothing was written"):
        import_with(out, age_identity[1])
    _nothing_written(new)


def test_the_wrong_identity_is_told_apart_from_a_changed_archive(
    exported: Path, new: Machine, on: Callable[[Machine], None], tmp_path: Path
) -> None:
    out = exported
    other = tmp_path / "other.txt"
    other.write_text(str(pyrage.x25519.Identity.generate()) + "\n")
    on(new)
    with pytest.raises(StateArchiveError, match="the identity does not open"):
        import_with(out, other)
    with pytest.raises(StateArchiveError, match="encrypted to recipient keys, not a passphrase"):
        invoke("state", "import", str(out))
    _nothing_written(new)


def _crafted(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    """A tar as the export writes it (a manifest, one kept file) plus one hostile member."""
    manifest = {
        "format": archive.FORMAT,
        "audit_key": False,
        "entries": [
            {
                "path": "probe-key",
                "type": "file",
                "mode": 0o600,
                "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            }
        ],
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, body in ((archive.MANIFEST, json.dumps(manifest).encode()), ("state/probe-key", b"test")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(body), 0o600
            tar.addfile(info, io.BytesIO(body))
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return gzip.compress(raw.getvalue())


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o600
    info.size = 4 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_member("state/../../escaped"), "would escape the state folder"),
        (_member("/tmp/escaped-absolute"), "would escape the state folder"),
        (_member("state/./probe-key"), "would escape the state folder"),
        (_member("state/link", tarfile.SYMTYPE, "/etc/passwd"), "is a symbolic link"),
        (_member("state/hard", tarfile.LNKTYPE, "state/probe-key"), "is a hard link"),
        (_member("state/dev", tarfile.CHRTYPE), "is a device"),
        (_member("state/fifo", tarfile.FIFOTYPE), "is a named pipe"),
        (_member("state/unlisted"), "members the manifest does not list"),
    ],
    ids=["dotdot", "absolute", "dot", "symlink", "hardlink", "device", "fifo", "unlisted"],
)
def test_a_member_that_could_escape_is_refused_and_nothing_is_written(
    new: Machine,
    on: Callable[[Machine], None],
    age_identity: tuple[str, Path],
    tmp_path: Path,
    member: tarfile.TarInfo,
    why: str,
) -> None:
    recipient, identity = age_identity
    out = tmp_path / "hostile.age"
    out.write_bytes(pyrage.encrypt(_crafted(member, b"evil"), [pyrage.x25519.Recipient.from_str(recipient)]))
    on(new)
    with pytest.raises(StateArchiveError, match=why):
        import_with(out, identity)
    _nothing_written(new)
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped-absolute").exists()


def test_a_folder_with_other_state_is_refused_and_force_keeps_it_aside(
    old: Machine, exported: Path, new: Machine, on: Callable[[Machine], None], age_identity: tuple[str, Path]
) -> None:
    out, identity = exported, age_identity[1]
    on(new)
    new.state.mkdir(parents=True, mode=0o700)
    (new.state / "keys.json").write_text('{"keys": []}\n')
    (new.state / "runs").mkdir()
    before = tree(new.state)
    with pytest.raises(StateArchiveError, match=r"holds other state \(keys.json: differs") as refused:
        import_with(out, identity)
    assert "--force" in refused.value.details[0]
    assert tree(new.state) == before and not new.audit_key.exists()
    assert [p.name for p in new.state.parent.iterdir()] == [".installer"]

    done = import_with(out, identity, "--force")
    assert done.exit_code == 0, done.output
    (kept_aside,) = [p for p in new.state.parent.iterdir() if p.name.startswith(".installer.replaced-")]
    assert tree(kept_aside) == before and str(kept_aside) in done.output.replace("\n", "")
    assert (new.state / "keys.json").read_bytes() == (old.state / "keys.json").read_bytes()


def test_a_machine_whose_audit_key_did_not_seal_the_trail_is_refused(
    exported: Path, new: Machine, on: Callable[[Machine], None], age_identity: tuple[str, Path]
) -> None:
    out, identity = exported, age_identity[1]
    new.audit_key.parent.mkdir(parents=True, mode=0o700)
    new.audit_key.write_text("ab" * 32 + "\n")
    new.audit_key.chmod(0o600)
    on(new)
    with pytest.raises(StateArchiveError, match=r"audit key .* is not the one that sealed"):
        import_with(out, identity)
    assert not new.state.parent.exists()
    assert new.audit_key.read_text() == "ab" * 32 + "\n"


def test_a_folder_holding_only_what_is_not_state_is_named_and_refused(
    exported: Path, new: Machine, on: Callable[[Machine], None], age_identity: tuple[str, Path]
) -> None:
    out, identity = exported, age_identity[1]
    on(new)
    (new.state / "runs").mkdir(parents=True)
    with pytest.raises(StateArchiveError, match=r"is not empty \(it holds runs\); nothing was written"):
        import_with(out, identity)
    assert [p.name for p in new.state.iterdir()] == ["runs"] and not new.audit_key.exists()
