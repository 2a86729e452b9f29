"""One release command at a time per deployment: a second fails at once naming the running one."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.base.runlog import RunLog
from installer.cli import _register, app
from installer.inventory import load_inventory
from installer.release import lock, state
from installer.release.lock import ReleaseBusy
from installer.release.state import Release
from installer.state import revisions
from tests.support.revisions import anchored_site, known_revision

runner = CliRunner()
_register()
DATA = Path(__file__).parent / "data"


class Notes:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(text)


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Release]]:
    """An installed site with a release of `main` at its first step."""
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as site:
        stable = known_revision(site)
        revisions.record("demo", stable, {"a": True, "b": True}, RunLog("up", "demo"))
        canary = revisions.next_revision(load_inventory(site), stable.manifest(), site.parent,
                                         site.parent / "playbooks", canary="main", canary_over=stable.number)
        r = Release("main", "tiny-llama", stable.number, canary.number, (20, 50, 100), step=0, step_since=0)
        state.save("demo", r)
        yield site, r


def test_a_second_release_command_fails_at_once_naming_the_running_one(release: tuple[Path, Release]) -> None:
    site, _ = release
    with lock.held("demo", "promote"):
        for command in ("promote", "abort", "start"):
            result = runner.invoke(app, ["release", command, "-i", str(site), "--model", "main"])
            assert isinstance(result.exception, ReleaseBusy), result.output
            assert "`installer release promote` (pid" in str(result.exception)
            assert f"`installer release {command}` was not started" in str(result.exception)
    with lock.held("demo", "abort"):  # released after the first
        pass
