"""One release command at a time per deployment: a second fails at once naming the running one,
and watch acts only on the release it judged, under the lock."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer import revisions
from installer.cli import _register, app
from installer.inventory import load_inventory
from installer.release import lock, metrics, scrape, state, watch
from installer.release.lock import ReleaseBusy
from installer.release.outcome import Outcome
from installer.release.scrape import Scrape
from installer.release.state import Release
from installer.runlog import RunLog
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


def _rolling_back(monkeypatch: pytest.MonkeyPatch, meanwhile: object = None) -> list[str]:
    """Two scrapes a window apart where the canary failed a tenth of its requests; `meanwhile`
    runs as the second scrape is taken. The aborts watch carried out."""
    def recorded(when: str) -> dict[str, metrics.Samples]:
        return {gw: metrics.parse((DATA / f"errors-{when}-{gw}.txt").read_text()) for gw in ("gw1", "gw2")}

    rounds = iter([Scrape(0, recorded("before")), Scrape(60, recorded("after"))])

    def scraped(inv: object, at: float) -> Scrape:
        got = next(rounds)
        if got.at == 60 and callable(meanwhile):
            meanwhile()
        return got

    monkeypatch.setattr(scrape, "scrape", scraped)
    aborted: list[str] = []
    monkeypatch.setattr(watch, "abort_release", lambda s, out, reporter, t, why: aborted.append(why))
    return aborted


def _watch(site: Path, notes: Notes, for_s: float | None = None) -> Outcome:
    clock = iter([0.0, 0.0, 0.0, 60.0, 60.0, 60.0])
    out = Outcome("watch", "main", RunLog("release-watch", "demo"))
    watch.watch(site, "demo", "main", out, notes, clock=lambda: next(clock),  # type: ignore[arg-type]
                sleep=lambda s: None, for_s=for_s)
    return out


def test_watch_does_not_act_on_a_release_promoted_meanwhile(
    release: tuple[Path, Release], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, r = release
    aborted = _rolling_back(monkeypatch, lambda: state.save("demo", r.advanced(now=30)))
    notes = Notes()
    out = _watch(site, notes, for_s=60)
    assert [d.action for d in out.decisions] == ["rollback"] and aborted == []
    assert any("the release changed while its window was judged (canary at 20%, now 50%)" in n for n in notes.lines)


def test_watch_stops_when_the_release_ended_meanwhile(
    release: tuple[Path, Release], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, _ = release
    aborted = _rolling_back(monkeypatch, lambda: state.clear("demo"))
    out = _watch(site, Notes())
    assert aborted == [] and out.decisions[0].action == "rollback"
    assert "the release ended before watch acted" in (out.run_dir / "installer.log").read_text()


def test_watch_does_not_act_while_another_command_runs(
    release: tuple[Path, Release], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, _ = release
    aborted = _rolling_back(monkeypatch)
    notes = Notes()
    with lock.held("demo", "promote"):
        _watch(site, notes, for_s=60)
    assert aborted == []
    assert any("not acting (rollback): `installer release promote` (pid" in n for n in notes.lines)
    again = _rolling_back(monkeypatch)
    _watch(site, Notes())  # the lock free again: it acts
    assert len(again) == 1 and again[0].startswith("rollback: canary error ratio")
