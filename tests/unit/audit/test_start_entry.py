"""A command that changes the deployment is recorded as it starts, not only as it ends: an `up`
killed with SIGKILL (or a lost control machine) runs no `finally`, and must still leave a trace."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.cli.root import audited
from installer.state import audit

runner = CliRunner()
_register()

# `installer keys create` through the real entry point, killed with SIGKILL inside its body.
_KILLED_MIDWAY = textwrap.dedent("""
    import os, signal, sys
    import installer.secrets.keys
    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    installer.secrets.keys.create = killed
    sys.argv = ["installer", "keys", "create", "--name", "svc"]
    from installer.cli import main
    main()
""")


def test_a_command_killed_midway_leaves_its_start_entry(state: Path, key_file: Path) -> None:
    env = {**os.environ, "INSTALLER_STATE_DIR": str(state), "PLI_AUDIT_KEY_FILE": str(key_file)}
    killed = subprocess.run([sys.executable, "-c", _KILLED_MIDWAY], env=env, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    (entry,) = audit.read(state / audit.FILE_NAME)
    assert entry["command"] == "keys create" and entry["result"] == "started" and entry["run"]
    assert entry["argv"] == ["keys", "create", "--name", "svc"]
    assert audit.verify(state / audit.FILE_NAME).ok
    shown = runner.invoke(app, ["audit"])
    assert shown.exit_code == 0 and "no end recorded" in shown.output, shown.output


def test_the_start_entry_is_written_before_the_body_runs(state: Path) -> None:
    log = state / audit.FILE_NAME
    seen: list[list[dict[str, object]]] = []
    with pytest.raises(RuntimeError), audited("rollback", ["rollback", "-i", "site.yml"], None):
        seen.append(audit.read(log))
        raise RuntimeError("host lab1 unreachable")
    [[start]] = seen
    assert start["command"] == "rollback" and start["result"] == "started" and start["error"] is None
    again, end = audit.read(log)
    assert again == start and end["run"] == start["run"] and end["result"] == "failed"
    assert end["error"] == "host lab1 unreachable"


def test_a_command_whose_start_cannot_be_recorded_does_not_run(state: Path, key_file: Path) -> None:
    """Nothing may change the deployment unrecorded: an unusable audit key stops the command
    before its body, with the fix."""
    assert runner.invoke(app, ["keys", "create", "--name", "first"]).exit_code == 0
    key_file.chmod(0o640)
    refused = runner.invoke(app, ["keys", "create", "--name", "second"])
    assert isinstance(refused.exception, audit.AuditError) and "open to other users" in str(refused.exception)
    assert "second" not in (state / "keys.json").read_text()
