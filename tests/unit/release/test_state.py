"""The release under way: its steps, its record beside the revisions, and `up`/`upgrade` refusing
to run over it (before any host is touched)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.base.runlog import RunLog
from installer.cli import _register, app
from installer.inventory import load_inventory
from installer.release import state
from installer.release.state import Release, ReleaseError
from installer.state import revisions
from tests.support.revisions import anchored_site, known_revision

runner = CliRunner()
_register()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as path:
        yield path


def test_steps_go_up_to_100_and_no_further() -> None:
    r = Release("main", "tiny", stable=1, canary=2, steps=(20, 50, 100))
    assert (r.weight, r.next_weight) == (0, 20)
    r = r.advanced(now=10).advanced(now=20)
    assert (r.weight, r.next_weight, r.step_since) == (50, 100, 20)
    r = r.advanced()
    assert (r.weight, r.next_weight) == (100, None)
    with pytest.raises(ReleaseError, match="already takes 100%"):
        r.advanced()


def test_record_round_trips_and_names_the_release_in_progress(site: Path) -> None:
    assert state.current("demo") is None
    with pytest.raises(ReleaseError, match="no gray release is in progress"):
        state.require("demo", "main")
    r = Release("main", "tiny", stable=1, canary=2, steps=(20, 100)).advanced(now=5)
    state.save("demo", r)
    assert state.current("demo") == r
    assert revisions.release_in_progress("demo")["weight"] == 20  # type: ignore[index]
    assert state.require("demo", "main") == r
    with pytest.raises(ReleaseError, match="is of model main, not embed"):
        state.require("demo", "embed")
    with pytest.raises(ReleaseError, match="already in progress") as exc:
        state.refuse_second("demo", "embed")
    assert "installer release abort -i INVENTORY --model main" in " ".join(exc.value.details)
    state.clear("demo")
    assert state.current("demo") is None


def test_canary_revision_is_its_own_revision(site: Path) -> None:
    stable = known_revision(site)
    inv = load_inventory(site)
    man, playbooks = stable.manifest(), site.parent / "playbooks"
    canary = revisions.next_revision(inv, man, site.parent, playbooks, canary="main", canary_over=stable.number)
    assert canary.number == stable.number + 1
    assert (canary.canary, canary.canary_over) == ("main", stable.number)
    assert canary.config_digest != stable.config_digest
    # Promoting records the inventory's own revision: the plain one, not the canary's.
    assert revisions.next_revision(inv, man, site.parent, playbooks).number == stable.number
    assert revisions.get("demo", canary.number).canary == "main"


def test_up_and_upgrade_refuse_while_a_release_is_in_progress(site: Path) -> None:
    rev = known_revision(site)
    revisions.record("demo", rev, {"a": True, "b": True}, RunLog("up", "demo"))
    state.save("demo", Release("main", "tiny", stable=rev.number, canary=rev.number + 1, steps=(20, 100)).advanced())
    for command in ("up", "upgrade"):
        result = runner.invoke(app, [command, "-i", str(site)])
        assert isinstance(result.exception, revisions.ReleaseInProgress), result.output
        text = " ".join([str(result.exception), *result.exception.details])
        assert "a gray release of model main is in progress" in text, text
        assert f"`installer {command}` would undo it; nothing was changed" in text
        assert "installer release promote -i INVENTORY --model main" in text
        assert "installer release abort -i INVENTORY --model main" in text
    # Nothing ran: the only run is the one recorded above.
    assert len(revisions.load()["deployments"]["demo"]["runs"]) == 1
    state.clear("demo")
