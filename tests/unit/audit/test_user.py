"""Who ran it: the login uid (/proc/self/loginuid), which the kernel keeps across sudo and su and
the user cannot set, not $SUDO_USER, which anyone can; the real uid's name when no login
session started the process."""

import os
import pwd
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.state import audit

runner = CliRunner()
_register()


def _another_user() -> pwd.struct_passwd:
    """A passwd entry that is not the real uid's, to show the login uid is what counts."""
    return next(p for p in pwd.getpwall() if p.pw_uid != os.getuid())


def _loginuid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    path = tmp_path / "loginuid"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(audit, "LOGINUID_FILE", path)


def test_the_user_is_the_login_uid_not_sudo_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    login = _another_user()
    _loginuid(tmp_path, monkeypatch, f"{login.pw_uid}\n")
    monkeypatch.setenv("SUDO_USER", "alice")
    entry = audit.new_entry("up", ["up"], None, None)
    assert entry["user"] == login.pw_name
    assert entry["run_as"] == pwd.getpwuid(os.geteuid()).pw_name
    assert "alice" not in entry.values() and "sudo_user" not in entry


@pytest.mark.parametrize("text", ["4294967295", None, "garbage"], ids=["unset", "unreadable", "damaged"])
def test_without_a_login_uid_the_real_uid_is_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None,
) -> None:
    _loginuid(tmp_path, monkeypatch, text)
    monkeypatch.setenv("SUDO_USER", "alice")
    assert audit.new_entry("up", ["up"], None, None)["user"] == pwd.getpwuid(os.getuid()).pw_name


def test_the_table_says_as_whom_it_ran(state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    login = _another_user()
    _loginuid(tmp_path, monkeypatch, str(login.pw_uid))
    assert runner.invoke(app, ["keys", "create", "--name", "svc"]).exit_code == 0
    shown = runner.invoke(app, ["audit"])
    run_as = pwd.getpwuid(os.geteuid()).pw_name
    assert f"{login.pw_name} (as {run_as})" in shown.output, shown.output
