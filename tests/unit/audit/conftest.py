"""Every audit test gets its own audit key folder (PLI_AUDIT_KEY_FILE), outside its state
folder, so no test reads or writes the machine's real key and checkpoints, and no entry goes to
the machine's syslog."""

from pathlib import Path

import pytest

from installer.base import paths


@pytest.fixture(autouse=True)
def key_file(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.mktemp("audit-key") / "audit" / "key"
    monkeypatch.setenv("PLI_AUDIT_KEY_FILE", str(path))
    monkeypatch.setenv("PLI_AUDIT_SYSLOG", "0")
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The state folder the CLI uses (not created: the first audited command makes it)."""
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SUDO_USER", raising=False)
    paths.use_state_dir(None)
    return tmp_path / "state"
