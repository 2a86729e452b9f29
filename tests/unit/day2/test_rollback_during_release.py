"""`installer rollback` runs site.yml like `up` and `upgrade`: it refuses during a gray release."""

from pathlib import Path

import pytest

from installer.day2 import upgrade
from installer.state import revisions
from installer.state.revisions import ReleaseInProgress


class Silent:
    def note(self, _text: str) -> None:
        pass


def test_rollback_refuses_while_a_release_is_in_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    site.write_text("deployment: demo\nhosts: [{name: a, address: 10.0.0.1}]\n"
                    "model: {path: weights, served_name: tiny}\nengine: {device: cpu}\n")
    revisions.set_release("demo", {"model": "main", "weight": 20})
    with pytest.raises(ReleaseInProgress) as err:
        upgrade.rollback(site, Silent(), to=1)  # type: ignore[arg-type]
    assert "`installer rollback` would undo it" in str(err.value)
    assert any("installer release promote" in d and "installer release abort" in d for d in err.value.details)
