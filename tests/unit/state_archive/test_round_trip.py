"""Export on one machine, import on another: every kept file comes back byte for byte with its
mode, what is left out stays behind, and the audit trail verifies at its new path."""

from collections.abc import Callable
from pathlib import Path

import pytest

from installer.state import audit
from tests.support.state_machines import Machine, export_to, import_with, invoke, tree

LEFT_BEHIND = {"runs", "converged", "state.lock"}


def _kept(state: Path) -> dict[str, tuple[int, bytes | None]]:
    return {k: v for k, v in tree(state).items() if k.split("/")[0] not in LEFT_BEHIND and "/.terraform" not in f"/{k}"}


def test_recipient_round_trip_restores_every_file_with_its_mode(
    old: Machine,
    new: Machine,
    on: Callable[[Machine], None],
    age_identity: tuple[str, Path],
    tmp_path: Path,
) -> None:
    recipient, identity = age_identity
    out = tmp_path / "prod-state.age"
    done = export_to(out, recipient)
    assert out.stat().st_mode & 0o777 == 0o600
    assert "left out runs" in done.output and "left out converged" in done.output and ".terraform" in done.output
    expected = _kept(old.state)
    assert "tls/prod/ca.key" in expected and expected["tls/prod/ca.key"][0] == 0o600
    assert expected["tls/prod/ca.pem"][0] == 0o644 and expected["tls"][0] == 0o700

    on(new)
    done = import_with(out, identity)
    assert done.exit_code == 0, done.output
    got = tree(new.state)
    audit_trail = got.pop("audit.jsonl")
    assert got == {k: v for k, v in expected.items() if k != "audit.jsonl"}
    assert new.state.stat().st_mode & 0o777 == 0o700
    assert not {"runs", "converged", "state.lock"} & set(got) and not any(".terraform" in k for k in got)

    # The trail: the old entries as the export found them (its own start among them: export is
    # audited), then the import, sealed with the carried key.
    old_lines = (expected["audit.jsonl"][1] or b"").splitlines()
    new_lines = (audit_trail[1] or b"").splitlines()
    assert new_lines[:2] == old_lines[:2] and len(new_lines) == 3
    assert [e["command"] for e in audit.read(old.state / audit.FILE_NAME)] == ["up", "state export", "state export"]
    assert new.audit_key.read_bytes() == old.audit_key.read_bytes()
    assert new.audit_key.stat().st_mode & 0o777 == 0o600 and new.audit_key.parent.stat().st_mode & 0o777 == 0o700
    verdict = audit.verify(new.state / audit.FILE_NAME)
    assert verdict.ok, verdict.why
    assert [e["command"] for e in audit.read(new.state / audit.FILE_NAME)][-1] == "state import"

    again = import_with(out, identity)
    assert again.exit_code == 0 and "nothing to do" in again.output


def test_passphrase_round_trip_and_a_wrong_passphrase_writes_nothing(
    old: Machine,
    new: Machine,
    on: Callable[[Machine], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = tmp_path / "passphrase"
    secret.write_text("correct horse battery staple\n")
    out = tmp_path / "prod-state.age"
    assert invoke("state", "export", "-o", str(out), "--passphrase-file", str(secret)).exit_code == 0
    assert out.read_bytes().startswith(b"age-encryption.org/v1\n-> scrypt ")
    expected = _kept(old.state)

    on(new)
    monkeypatch.setenv("PLI_STATE_PASSPHRASE", "correct horse battery stapler")
    from installer.state_archive import StateArchiveError

    with pytest.raises(StateArchiveError, match=r"the passphrase does not open .*nothing was written"):
        invoke("state", "import", str(out))
    assert not new.state.parent.exists() or list(new.state.parent.iterdir()) == []
    assert not new.audit_key.exists()

    monkeypatch.setenv("PLI_STATE_PASSPHRASE", "correct horse battery staple")
    assert invoke("state", "import", str(out)).exit_code == 0
    got = tree(new.state)
    got.pop("audit.jsonl")
    assert got == {k: v for k, v in expected.items() if k != "audit.jsonl"}


def test_a_short_export_passphrase_is_refused(old: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from installer.state_archive import StateArchiveError

    monkeypatch.setenv("PLI_STATE_PASSPHRASE", "short")
    with pytest.raises(StateArchiveError, match="shorter than 12"):
        invoke("state", "export", "-o", str(tmp_path / "x.age"))
    assert not (tmp_path / "x.age").exists()
