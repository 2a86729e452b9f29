"""The runs' summaries read back (installer/base/runlog.py summaries): `installer status`'s release
column (the last successful `up`) and `installer plan`'s GPU fit (the last `doctor`) read them
the same way, from folders RunLog made."""

import os
from pathlib import Path

import pytest

from installer.base.runlog import RunLog, summaries
from installer.status.deployment import last_release


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _run(command: str, deployment: str, age_s: int, summary: dict[str, object] | None) -> RunLog:
    log = RunLog(command, deployment)
    if summary is not None:
        log.write_summary(summary)
    when = log.started - age_s
    os.utime(log.dir, (when, when))
    return log


def test_newest_first_passing_over_runs_without_one_and_other_deployments() -> None:
    _run("up", "demo", 300, {"success": True, "release_id": "r-old"})
    _run("up", "demo", 200, {"success": True, "release_id": "r-new"})  # in the same second: <name>-2
    _run("up", "demo", 100, None)  # stopped before it wrote its summary
    _run("up", "demo-2", 50, {"success": True, "release_id": "r-other"})  # the glob finds it too
    _run("doctor", "demo", 10, {"hosts": []})
    assert [s["release_id"] for s in summaries("up", "demo")] == ["r-new", "r-old"]
    assert [s["command"] for s in summaries("doctor", "demo")] == ["doctor"]
    assert list(summaries("up", "none")) == []


def test_the_release_column_is_the_last_successful_up() -> None:
    assert last_release("demo") is None
    _run("up", "demo", 300, {"success": True, "release_id": "r-1"})
    _run("up", "demo", 200, {"success": False, "release_id": "r-2"})
    assert last_release("demo") == "r-1"
    _run("up", "demo", 100, {"success": True, "release_id": "r-3"})
    assert last_release("demo") == "r-3"
