"""The release commands' refusals (before any host is touched), and status on recorded scrapes.
What the release controller decides is in test_controller_tick.py; watch, promote and abort
through it in test_controller_cli.py."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.base.runlog import RunLog
from installer.cli import _register, app
from installer.inventory import load_inventory
from installer.release import metrics, scrape, state
from installer.release.scrape import Scrape
from installer.release.state import Release, ReleaseError
from installer.state import revisions
from tests.support.revisions import anchored_site, known_revision

runner = CliRunner()
_register()
DATA = Path(__file__).parent / "data"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as path:
        yield path


def _installed(site: Path) -> revisions.Revision:
    rev = known_revision(site)
    revisions.record("demo", rev, {"a": True, "b": True}, RunLog("up", "demo"))
    return rev


def _error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, ReleaseError), result.output
    return " ".join([str(result.exception), *result.exception.details])


def test_promote_abort_watch_need_a_release(site: Path) -> None:
    _installed(site)
    for command in ("promote", "abort", "watch"):
        text = _error(["release", command, "-i", str(site), "--model", "main"])
        assert "no gray release is in progress on deployment demo" in text
        assert "installer release start -i INVENTORY --model main" in text


def test_start_refuses_an_unknown_model_and_an_unchanged_one(site: Path) -> None:
    _installed(site)
    text = _error(["release", "start", "-i", str(site), "--model", "chat"])
    assert f"{site} has no model named chat" in text and "its models: main" in text
    text = _error(["release", "start", "-i", str(site), "--model", "main"])
    assert "is what revision 1 already runs: nothing to release" in text


def test_start_refuses_before_install_and_over_a_release(site: Path) -> None:
    assert "has no installed revision on record" in _error(["release", "start", "-i", str(site), "-m", "main"])
    rev = _installed(site)
    state.save("demo", Release("main", "tiny", rev.number, rev.number + 1, (20, 100)))
    text = _error(["release", "start", "-i", str(site), "-m", "main"])
    assert "a gray release of model main is already in progress" in text


def test_start_refuses_a_new_served_name(site: Path) -> None:
    _installed(site)
    site.write_text(site.read_text().replace("served_name: tiny", "served_name: tiny-2"))
    text = _error(["release", "start", "-i", str(site), "-m", "main"])
    assert "is served as 'tiny', the inventory says 'tiny-2'" in text


def _recorded(name: str, when: str) -> dict[str, metrics.Samples]:
    return {gw: metrics.parse((DATA / f"{name}-{when}-{gw}.txt").read_text()) for gw in ("gw1", "gw2")}


def test_status_shows_both_stages_with_share_engines_and_figures(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from installer.release import report

    stable = _installed(site)
    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}"))
    canary = revisions.next_revision(load_inventory(site), stable.manifest(), site.parent, site.parent / "playbooks",
                                     canary="main", canary_over=stable.number)
    state.save("demo", Release("main", "tiny-llama", stable.number, canary.number, (20, 50, 100), step=1))
    answered = Scrape(0, _recorded("slow", "after"), {"b": "gateway unreachable"})
    monkeypatch.setattr(scrape, "scrape", lambda inv, at: answered)
    got = report.status(site)
    rows = {r[0]: r for r in got.rows}
    assert rows["stable"][:3] == ["stable", "50%", str(stable.number)]
    assert rows["canary"][:3] == ["canary", "50%", str(canary.number)]
    assert rows["canary"][3] == "a-canary, b-canary"
    assert rows["stable"][3] == "a, b"
    assert rows["canary"][4] == "220"  # every canary attempt both gateways counted since they started
    assert got.problems == {"b": "gateway unreachable"}
    assert got.decision is not None and got.decision.action == "rollback"


def test_installer_status_gets_canary_rows_and_stage_columns(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from installer import status
    from installer.release.collector import StageCollector

    stable = _installed(site)
    ctx = status.Context(load_inventory(site), None)
    rows = [status.Row("a", "10.0.0.1", "a"), status.Row("b", "10.0.0.2", "b")]
    StageCollector().collect(ctx, rows)  # no release: nothing to add
    assert len(rows) == 2 and rows[0].values == {}

    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}"))
    canary = revisions.next_revision(load_inventory(site), stable.manifest(), site.parent, site.parent / "playbooks",
                                     canary="main", canary_over=stable.number)
    state.save("demo", Release("main", "tiny-llama", stable.number, canary.number, (20, 100), step=0))
    answered = Scrape(0, _recorded("errors", "after"))
    monkeypatch.setattr(scrape, "scrape", lambda inv, at, timeout_s: answered)
    StageCollector().collect(ctx, rows)
    by_engine = {r.engine: r for r in rows}
    assert set(by_engine) == {"a", "b", "a-canary", "b-canary"}
    assert by_engine["a"].values["stage"] == "stable 80%"
    assert by_engine["b-canary"].values["stage"] == "canary 20%"
    assert by_engine["b-canary"].values["stage_error_ratio"] == pytest.approx(10 / 220)
    assert any(isinstance(c, StageCollector) for c in status.COLLECTORS[:1])  # registered, first


def test_stable_is_replaced_behind_the_canary_only_when_the_canary_would_not_change(site: Path) -> None:
    """Engine settings: both stages read one folder, the canary runs on untouched while stable
    changes. Weights of its own: replacing stable would move the canary off `.canary`."""
    from installer.release import promote, spec

    stable = _installed(site)
    (site.parent / "weights-2").mkdir()
    (site.parent / "weights-2" / "config.json").write_text("{}")
    original = site.read_text()

    def sides_for(text: str) -> spec.Sides:
        site.write_text(text)
        canary = revisions.next_revision(load_inventory(site), stable.manifest(), site.parent,
                                         site.parent / "playbooks", canary="main", canary_over=stable.number)
        return spec.sides("demo", Release("main", "tiny", stable.number, canary.number, (100,), step=0))

    settings = sides_for(original.replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}"))
    assert promote._canaries(settings.with_canary(settings.target_inv)) == promote._canaries(settings.with_canary())
    weights = sides_for(original.replace("path: weights", "path: weights-2"))
    running = promote._canaries(weights.with_canary())
    assert running and {e.model_dir for e in running} == {"tiny.canary"}  # type: ignore[attr-defined]
    assert promote._canaries(weights.with_canary(weights.target_inv)) != running


def test_status_without_a_release_says_so(site: Path) -> None:
    _installed(site)
    result = runner.invoke(app, ["release", "status", "-i", str(site), "--model", "main"])
    assert result.exit_code == 0 and "no gray release in progress" in result.output
