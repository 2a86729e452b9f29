"""Looking at the trail changes nothing: `installer audit` (any form) given no inventory, in a
folder with no state, leaves no ./.installer behind (it used to make an empty one)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.base import paths
from installer.cli import _register, app

runner = CliRunner()
_register()


@pytest.mark.parametrize(
    "argv", [["audit"], ["audit", "--json"], ["audit", "--verify"], ["audit", "--verify", "--json"]],
)
def test_audit_without_an_inventory_creates_no_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INSTALLER_STATE_DIR", raising=False)
    paths.use_state_dir(None)
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / paths.STATE_DIR_NAME).exists()
    assert list(tmp_path.iterdir()) == []
