"""The audit trail (installer/state/audit.py): JSON lines chained with HMAC-SHA256 in the state
folder, 0600, no secret, written by the CLI for every command that changes the deployment, as it
starts and as it ends, failed runs too. Attacks the key and the checkpoint answer:
test_tampering.py; the start entry of a killed command: test_start_entry.py."""

import hashlib
import hmac
import json
import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.cli.root import AUDITED
from installer.state import audit

runner = CliRunner()
_register()


def _trail(path: Path, n: int) -> list[dict[str, Any]]:
    return [audit.append(audit.new_entry(f"cmd{i}", ["-i", "site.yml"], None, None), path) for i in range(n)]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines))


def test_each_entry_chains_to_the_one_before(tmp_path: Path, key_file: Path) -> None:
    log = tmp_path / "audit.jsonl"
    entries = _trail(log, 3)
    key = bytes.fromhex(key_file.read_text().strip())
    assert entries[0]["prev"] == audit.GENESIS
    assert [e["prev"] for e in entries[1:]] == [e["mac"] for e in entries[:-1]]
    for line, entry in zip(_lines(log), entries, strict=True):
        stored = json.loads(line)
        assert stored == entry and "hash" not in stored and stored["key_id"] == audit.key_id(key)
        assert stored["mac"] == hmac.new(key, audit.canonical(stored), hashlib.sha256).hexdigest()
    verdict = audit.verify(log)
    assert verdict.ok and verdict.entries == 3 and verdict.last_mac == entries[-1]["mac"], verdict
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def _edited(lines: list[str]) -> list[str]:
    entry = json.loads(lines[1])
    entry["user"] = "somebody-else"
    return [lines[0], json.dumps(entry), *lines[2:]]


def _edited_and_resealed_with_another_key(lines: list[str]) -> list[str]:
    entry = json.loads(lines[1])
    entry["result"] = "ok" if entry["result"] != "ok" else "failed"
    entry["mac"] = audit.entry_mac(b"\x01" * 32, entry)  # keeps the real key_id: only the mac is forged
    return [lines[0], json.dumps(entry), *lines[2:]]


def _forged(lines: list[str]) -> list[str]:
    first = json.loads(lines[0])
    forged = {**first, "command": "keys revoke", "prev": first["mac"]}
    forged["mac"] = audit.entry_mac(b"\x01" * 32, forged)
    return [lines[0], json.dumps(forged), *lines[1:]]


@pytest.mark.parametrize(
    ("tamper", "line", "why"),
    [
        (_edited, 2, "does not match its mac"),
        (_edited_and_resealed_with_another_key, 2, "does not match its mac"),
        (lambda lines: [lines[0], *lines[2:]], 2, "does not chain"),  # a middle entry deleted
        (lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], 2, "does not chain"),  # reordered
        (_forged, 2, "does not match its mac"),  # inserted, with a link of its own but no key
        (lambda lines: lines[1:], 1, "does not chain to the start"),  # the head cut
        (lambda lines: [lines[0], "{not json", *lines[1:]], 2, "not a JSON line"),
    ],
    ids=["edited", "edited-resealed", "deleted", "reordered", "inserted", "head-cut", "garbage"],
)
def test_tampering_is_found_at_its_line(tmp_path: Path, tamper: Any, line: int, why: str) -> None:
    log = tmp_path / "audit.jsonl"
    _trail(log, 4)
    _write(log, tamper(_lines(log)))
    verdict = audit.verify(log)
    assert not verdict.ok and verdict.broken_line == line and why in verdict.why, verdict


def _append_many(path: str, tag: str, n: int) -> None:
    for i in range(n):
        audit.append(audit.new_entry(f"{tag}{i}", [], None, None), Path(path))


def test_concurrent_appends_keep_one_chain(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=_append_many, args=(str(log), tag, 60)) for tag in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    verdict = audit.verify(log)
    assert verdict.ok and verdict.entries == 120, verdict
    commands = [e["command"] for e in audit.read(log)]
    assert sorted(commands) == sorted([f"{t}{i}" for t in "ab" for i in range(60)])


def test_redaction() -> None:
    argv = ["--password", "hunter2", "--api-key=sk-pli-abcdefghijkl", "--name", "team-a", "Bearer abc.def"]
    assert audit.redact_argv(argv) == [
        "--password", audit.REDACTED, f"--api-key={audit.REDACTED}", "--name", "team-a", audit.REDACTED,
    ]


def test_keys_create_is_recorded_without_its_secret(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_USER", "alice")  # said by the environment, so not believed
    monkeypatch.setattr(audit, "_login_uid", lambda: None)
    created = runner.invoke(app, ["keys", "create", "--name", "svc", "--rpm", "5"])
    assert created.exit_code == 0, created.output
    secret = next(line for line in created.output.splitlines() if line.startswith("sk-pli-"))
    log = state / audit.FILE_NAME
    assert secret not in log.read_text() and secret[7:19] not in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(state.stat().st_mode) == 0o700
    start, entry = audit.read(log)
    assert start["result"] == "started" and start["run"] == entry["run"] and start["command"] == "keys create"
    assert entry["command"] == "keys create" and entry["result"] == "ok" and entry["error"] is None
    assert entry["argv"] == ["keys", "create", "--name", "svc", "--rpm", "5"]
    assert "sudo_user" not in entry and "alice" not in json.dumps(entry)
    assert entry["user"] and entry["time"].endswith("+00:00")
    assert runner.invoke(app, ["keys", "list"]).exit_code == 0
    assert len(audit.read(log)) == 2  # reading commands leave no entry
    shown = runner.invoke(app, ["audit"])
    assert shown.exit_code == 0 and "keys create" in shown.output and entry["user"] in shown.output
    assert "no end recorded" not in shown.output
    checked = runner.invoke(app, ["audit", "--verify"])
    assert checked.exit_code == 0 and "2 entries" in checked.output, checked.output


def test_a_failing_command_is_recorded_as_failed(state: Path, tmp_path: Path) -> None:
    failed = runner.invoke(app, ["keys", "revoke", "nobody"])
    assert failed.exit_code != 0
    inventory = tmp_path / "site.yml"
    inventory.write_text("deployment: d\n")  # no hosts, no model: refused before any host
    assert runner.invoke(app, ["up", "-i", str(inventory), "--check"]).exit_code != 0  # changes nothing
    assert runner.invoke(app, ["up", "-i", str(inventory), "--insecure"]).exit_code != 0
    revoke_start, revoke, up_start, up = audit.read(state / audit.FILE_NAME)
    assert [revoke_start["result"], up_start["result"]] == ["started", "started"]
    assert revoke_start["run"] == revoke["run"] != up["run"] == up_start["run"]
    assert revoke["command"] == "keys revoke" and revoke["result"] == "failed"
    assert "nobody" in revoke["error"] and "\n" not in revoke["error"]
    assert up["command"] == "up" and up["result"] == "failed" and up["error"]
    assert up["argv"][-1] == "--insecure" and up["inventory"] == str(inventory)
    assert up["inventory_sha256"] == hashlib.sha256(inventory.read_bytes()).hexdigest()


def test_a_terminated_command_is_recorded_as_failed(state: Path) -> None:
    """SIGTERM while Ansible runs ends the installer with SystemExit(143) (installer/base/procs.py)."""
    from installer.cli.root import audited

    with pytest.raises(SystemExit), audited("up", ["up", "-i", "site.yml"], None):
        raise SystemExit(143)
    start, entry = audit.read(state / audit.FILE_NAME)
    assert start["result"] == "started" and entry["command"] == "up" and entry["result"] == "failed"
    assert entry["error"] == "terminated (exit code 143)"


def test_verify_names_the_broken_line_and_exits_1(state: Path) -> None:
    state.mkdir(mode=0o700)
    log = state / audit.FILE_NAME
    _trail(log, 3)
    _write(log, _edited(_lines(log)))
    broken = runner.invoke(app, ["audit", "--verify"])
    # installer.cli.main prints an InstallerError as one red line and exits 1
    assert isinstance(broken.exception, audit.AuditError)
    assert f"{log}:2:" in str(broken.exception) and "edited" in str(broken.exception)
    assert "1 entries before it are intact" in broken.exception.details[-1]
    as_json = runner.invoke(app, ["audit", "--verify", "--json"])
    report = json.loads(as_json.output)
    assert as_json.exit_code == 1 and report["broken_line"] == 2 and report["entries"] == 1


def test_every_audited_command_exists() -> None:
    """A renamed command must not drop out of the trail unnoticed."""
    import typer.main

    root = typer.main.get_command(app)
    ctx = root.make_context("installer", ["keys", "list"], resilient_parsing=True)
    for name in AUDITED:
        command: Any = root
        for part in name.split():
            command = command.get_command(ctx, part)
            assert command is not None, name
