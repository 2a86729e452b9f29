"""What the unkeyed sha256 chain could not see (issue 40, item 6): a cut tail, a chain rebuilt
after an edit, a forged entry appended, a deleted trail. The key (outside the state folder) and
the signed checkpoint beside it find each one; `installer audit --verify` exits non-zero and
says what happened. The tampering helpers work on entries of either format, so each test also
fails against the old unkeyed chain."""

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.secrets import keys
from installer.state import audit

runner = CliRunner()
_register()

Lines = list[str]


def _trail(log: Path, n: int) -> Lines:
    log.parent.mkdir(mode=0o700, exist_ok=True)
    for i in range(n):
        audit.append(audit.new_entry(f"keys create {i}", ["keys", "create", "--name", f"k{i}"], None, None), log)
    return log.read_text().splitlines()


def _write(log: Path, lines: Lines) -> None:
    log.write_text("".join(f"{line}\n" for line in lines))


def _failure(expect: str) -> str:
    """`installer audit --verify` must fail; its message (and fix lines), for the test to read."""
    result = runner.invoke(app, ["audit", "--verify"])
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, audit.AuditError), result.exception
    text = " ".join([str(result.exception), *result.exception.details])
    assert expect in text, text
    return text


def _unkeyed(entry: dict[str, Any]) -> dict[str, Any]:
    """Sealed the way anyone can: unkeyed sha256 (the old format)."""
    entry = {k: v for k, v in entry.items() if k not in ("mac", "key_id")}
    entry["hash"] = audit.entry_hash(entry)
    return entry


def _with_own_key(entry: dict[str, Any]) -> dict[str, Any]:
    """Sealed with a key the attacker made up (and its id)."""
    key = b"\x02" * 32
    entry = {**{k: v for k, v in entry.items() if k not in ("hash", "mac")}, "key_id": audit.key_id(key)}
    entry["mac"] = audit.entry_mac(key, entry)
    return entry


def _seal_of(entry: dict[str, Any]) -> str:
    return str(entry.get("mac") or entry["hash"])


def _rebuilt(lines: Lines, start: int, seal: Callable[[dict[str, Any]], dict[str, Any]]) -> Lines:
    """Entry `start` (0-based) edited, and it and every later one re-sealed and re-chained."""
    out = lines[:start]
    prev = _seal_of(json.loads(lines[start - 1])) if start else audit.GENESIS
    for i, line in enumerate(lines[start:]):
        entry = json.loads(line)
        if i == 0:
            entry["result"], entry["error"] = "failed", "edited afterwards"
        entry = seal({**entry, "prev": prev})
        prev = _seal_of(entry)
        out.append(json.dumps(entry))
    return out


def test_a_cut_last_entry_is_found(state: Path) -> None:
    log = state / audit.FILE_NAME
    lines = _trail(log, 4)
    _write(log, lines[:-1])
    text = _failure("cut off its end")
    assert "says the trail held 4 entries, it holds 3" in text
    # and the next command refuses to write over the evidence (it would move the checkpoint)
    with pytest.raises(audit.AuditError, match="refusing to append"):
        audit.append(audit.new_entry("keys revoke", [], None, None), log)
    assert log.read_text().splitlines() == lines[:-1]


@pytest.mark.parametrize(
    ("start", "seal", "expect"),
    [
        (0, _unkeyed, "the trail was rewritten"),  # rebuilt the old way: consistent, not the checkpoint's
        (1, _unkeyed, "unkeyed (legacy) entry after keyed ones"),
        (1, _with_own_key, "sealed with another key"),
    ],
    ids=["all-rehashed", "tail-rehashed", "tail-resealed-own-key"],
)
def test_an_entry_rewritten_and_the_chain_rehashed_is_found(
    state: Path, start: int, seal: Callable[[dict[str, Any]], dict[str, Any]], expect: str,
) -> None:
    log = state / audit.FILE_NAME
    _write(log, _rebuilt(_trail(log, 4), start, seal))
    _failure(expect)


def _forged_after(lines: Lines, seal: Callable[[dict[str, Any]], dict[str, Any]]) -> Lines:
    last = json.loads(lines[-1])
    forged = {**last, "command": "keys revoke", "argv": ["keys", "revoke", "k0"], "prev": _seal_of(last)}
    return [*lines, json.dumps(seal(forged))]


def _with_stolen_key_id(entry: dict[str, Any]) -> dict[str, Any]:
    """The real key's id copied, the mac guessed."""
    sealed = _with_own_key(entry)
    return {**sealed, "key_id": entry.get("key_id", sealed["key_id"])}


@pytest.mark.parametrize(
    ("seal", "expect"),
    [
        (_unkeyed, "unkeyed (legacy) entry after keyed ones"),
        (_with_own_key, "sealed with another key"),
        (_with_stolen_key_id, "does not match its mac"),
    ],
    ids=["unkeyed", "own-key", "stolen-key-id"],
)
def test_a_forged_entry_appended_is_found(
    state: Path, seal: Callable[[dict[str, Any]], dict[str, Any]], expect: str,
) -> None:
    log = state / audit.FILE_NAME
    _write(log, _forged_after(_trail(log, 3), seal))
    assert f"{log}:4:" in _failure(expect)


def test_the_trail_deleted_while_state_exists_is_found(state: Path) -> None:
    assert runner.invoke(app, ["keys", "create", "--name", "svc"]).exit_code == 0
    (state / audit.FILE_NAME).unlink()
    text = _failure("the trail is missing")
    assert "it was deleted" in text


def test_a_command_after_the_trail_was_deleted_refuses_to_hide_it(state: Path) -> None:
    assert runner.invoke(app, ["keys", "create", "--name", "svc"]).exit_code == 0
    (state / audit.FILE_NAME).unlink()
    refused = runner.invoke(app, ["keys", "create", "--name", "other"])
    assert isinstance(refused.exception, audit.AuditError), refused.output
    assert "refusing to append" in str(refused.exception) and "it was deleted" in str(refused.exception)
    assert (state / audit.FILE_NAME).read_text() == "" and "other" not in (state / "keys.json").read_text()
    _failure("the trail is empty")


def test_a_state_folder_removed_whole_starts_a_new_trail_that_records_the_old_one(state: Path) -> None:
    """`rm -rf .installer` (or a fresh clone where an old one was) is a fresh start, not an
    attack that must block every command; the loss is sealed into the new trail's first entry."""
    assert runner.invoke(app, ["keys", "create", "--name", "svc"]).exit_code == 0
    old_last = audit.read(state / audit.FILE_NAME)[-1]["mac"]
    shutil.rmtree(state)
    _failure("it was deleted")  # until the next command, the loss is a failure
    assert runner.invoke(app, ["keys", "create", "--name", "svc"]).exit_code == 0
    first = audit.read(state / audit.FILE_NAME)[0]
    assert first["previous_trail"] == {"entries": 2, "last_mac": old_last} and first["prev"] == audit.GENESIS
    verdict = audit.verify(state / audit.FILE_NAME)
    assert verdict.ok and verdict.entries == 2, verdict
    assert "line 1 starts a new trail where one of 2 entries" in verdict.notes[0]
    shown = runner.invoke(app, ["audit", "--verify"])
    assert shown.exit_code == 0 and "starts a new trail" in shown.output, shown.output


def test_state_without_any_trail_or_checkpoint_is_found(state: Path) -> None:
    """The trail and its checkpoint both gone (or never made): the deployment state says a
    changing command ran, so "intact: 0 entries" would be a lie."""
    state.mkdir(mode=0o700)
    (state / "state.json").write_text('{"deployments": {"d": {"revisions": [{"number": 1}]}}}\n')
    text = _failure("holds deployment state (state.json)")
    assert "the trail was deleted, or this state predates it" in text


def test_a_probe_key_alone_is_not_deployment_state(state: Path) -> None:
    """`up --check` makes the installer's probe key but is not audited: no false alarm."""
    state.mkdir(mode=0o700)
    keys.ensure_probe_key()
    assert audit._PROBE_KEY_NAME == keys.PROBE_KEY_NAME
    assert audit.deployment_state(state) == []
    checked = runner.invoke(app, ["audit", "--verify"])
    assert checked.exit_code == 0 and "no audit trail" in checked.output, checked.output
    keys.create("svc")
    assert audit.deployment_state(state) == ["keys.json"]


def test_a_checkpoint_behind_by_an_interrupted_append_is_no_failure(state: Path) -> None:
    """A run may stop between writing its entry and moving the checkpoint: the trail is then
    ahead, its extra entries sealed with the key. Said, not failed; the next append catches up."""
    log = state / audit.FILE_NAME
    _trail(log, 2)
    checkpoint = audit.checkpoint_file(state)
    before = checkpoint.read_bytes()
    _trail(log, 1)
    checkpoint.write_bytes(before)
    verdict = audit.verify(log)
    assert verdict.ok and verdict.entries == 3 and "1 entries after the checkpoint" in verdict.notes[0], verdict
    _trail(log, 1)
    assert audit.verify(log).notes == ()


def test_a_checkpoint_edited_or_copied_from_another_folder_is_found(state: Path, tmp_path: Path) -> None:
    log = state / audit.FILE_NAME
    _trail(log, 2)
    checkpoint = audit.checkpoint_file(state)
    body = json.loads(checkpoint.read_text())
    checkpoint.write_text(json.dumps({**body, "entries": 1}))
    assert "not signed by the audit key" in audit.verify(log).why
    other = tmp_path / "other"
    _trail(other / audit.FILE_NAME, 2)
    checkpoint.write_bytes(audit.checkpoint_file(other).read_bytes())
    assert "belongs to" in audit.verify(log).why


def test_a_missing_key_is_never_silently_replaced(state: Path, key_file: Path) -> None:
    log = state / audit.FILE_NAME
    _trail(log, 2)
    key_file.unlink()
    assert f"the key {key_file} that signed it is missing" in audit.verify(log).why
    with pytest.raises(audit.AuditError, match="is missing, but the trail") as refused:
        audit.append(audit.new_entry("up", [], None, None), log)
    assert any("restore" in line for line in refused.value.details)
    assert not key_file.exists() and len(log.read_text().splitlines()) == 2


def test_the_key_and_checkpoint_live_outside_the_state_folder_and_private(state: Path, key_file: Path) -> None:
    log = state / audit.FILE_NAME
    _trail(log, 1)
    checkpoint = audit.checkpoint_file(state)
    assert checkpoint.parent == key_file.parent / "checkpoints" and checkpoint.is_file()
    assert not checkpoint.is_relative_to(state) and not key_file.is_relative_to(state)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o600
    assert len(bytes.fromhex(key_file.read_text().strip())) == 32
    assert sorted(os.listdir(key_file.parent)) == ["checkpoints", "key"]  # no temporary file left behind


def test_a_key_inside_the_state_folder_or_open_to_others_is_refused(
    state: Path, key_file: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = state / audit.FILE_NAME
    _trail(log, 1)
    key_file.chmod(0o644)
    with pytest.raises(audit.AuditError, match="open to other users") as loose:
        audit.append(audit.new_entry("up", [], None, None), log)
    assert f"chmod 600 {key_file}" in loose.value.details[0]
    assert "open to other users" in audit.verify(log).why
    monkeypatch.setenv(audit.KEY_ENV, str(state / "audit-key"))
    with pytest.raises(audit.AuditError, match="inside the state folder"):
        audit.append(audit.new_entry("up", [], None, None), log)


def test_the_default_key_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(audit.KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(audit, "_running_as_root", lambda: False)
    assert audit.key_file() == tmp_path / "config" / "private-llm-installer" / "audit" / "key"
    monkeypatch.setattr(audit, "_running_as_root", lambda: True)
    assert audit.key_file() == Path("/var/lib/private-llm-installer/audit/key")


def _legacy_trail(log: Path, n: int) -> Lines:
    """Entries as the installer wrote them before the key: unkeyed sha256 `hash` and `prev`."""
    lines, prev = [], audit.GENESIS
    for i in range(n):
        entry = {**audit.new_entry(f"up {i}", ["up"], None, None), "prev": prev}
        entry["hash"] = audit.entry_hash(entry)
        prev = entry["hash"]
        lines.append(json.dumps(entry, sort_keys=True, separators=(",", ":")))
    log.parent.mkdir(mode=0o700, exist_ok=True)
    _write(log, lines)
    return lines


def test_legacy_entries_are_reported_then_sealed_by_the_first_keyed_one(state: Path) -> None:
    log = state / audit.FILE_NAME
    legacy = _legacy_trail(log, 3)
    verdict = audit.verify(log)
    assert verdict.ok and verdict.legacy == 3
    assert "3 legacy unkeyed entries, cannot be authenticated" in verdict.notes[0]
    shown = runner.invoke(app, ["audit", "--verify"])
    assert shown.exit_code == 0 and "3 legacy unkeyed entries" in shown.output, shown.output
    sealed = audit.append(audit.new_entry("keys create", [], None, None), log)
    assert sealed["prev"] == json.loads(legacy[-1])["hash"]  # the mac covers the legacy chain's head
    verdict = audit.verify(log)
    assert verdict.ok and verdict.entries == 4 and verdict.legacy == 3
    assert "sealed by line 4" in verdict.notes[0], verdict
    # rebuilding the legacy part (anyone can) no longer goes unnoticed: the seal's prev differs
    _write(log, [*_rebuilt(legacy, 1, _unkeyed), *log.read_text().splitlines()[3:]])
    verdict = audit.verify(log)
    assert verdict.broken_line == 4 and "legacy" in verdict.why, verdict


def test_syslog_gets_each_mac_when_there_is_one_and_nothing_fails_without(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    import types

    log = state / audit.FILE_NAME
    monkeypatch.setenv(audit.SYSLOG_ENV, "1")
    monkeypatch.setattr(audit, "SYSLOG_SOCKET", tmp_path / "no-such-socket")
    _trail(log, 1)  # no syslog on this machine: the append still works
    sent: list[str] = []
    fake = types.SimpleNamespace(
        LOG_PID=1, LOG_AUTHPRIV=80, LOG_INFO=6, openlog=lambda *a: None, syslog=lambda _p, m: sent.append(m),
    )
    monkeypatch.setitem(sys.modules, "syslog", fake)
    monkeypatch.setattr(audit, "SYSLOG_SOCKET", tmp_path)  # exists
    entry = audit.append(audit.new_entry("up", ["up", "--password", "hunter2"], None, None), log)
    assert len(sent) == 1 and entry["mac"] in sent[0] and "entry 2" in sent[0] and "hunter2" not in sent[0]
