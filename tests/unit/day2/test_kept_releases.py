"""The releases the hosts keep (installer/state/revisions.kept_on_hosts): the list an `up` renders
is the one the next `up` of the same revision renders again, so that run takes the converged
fast path instead of a full configure (the list is one of the variables it compares)."""

import json
from pathlib import Path

import pytest

from installer.base.runlog import RunLog
from installer.state import revisions


def _rev(n: int) -> dict:
    return {"deployment": "demo", "number": n, "bundle_id": f"{n:02d}" + "b" * 30, "release_id": f"r{n}",
            "config_digest": f"c{n}", "created": "2026-12-06T00:00:00Z", "bundle_root": "/x"}


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path))
    return tmp_path


def _write(state: Path, hosts: dict[str, int], previous: dict[str, int], numbers: range) -> None:
    (state / "state.json").write_text(json.dumps({"deployments": {"demo": {
        "revisions": [_rev(n) for n in numbers], "hosts": hosts, "previous": previous, "runs": []}}}))


def test_the_second_up_of_a_revision_keeps_what_the_first_kept(state: Path) -> None:
    # Hosts run 7 and would roll back to 3 (an old release); revision 8 is deployed now.
    _write(state, {"a": 7, "b": 7}, {"a": 3, "b": 3}, range(1, 9))
    target = revisions.Revision(**_rev(8))
    first = revisions.kept_on_hosts("demo", target)
    revisions.record("demo", target, {"a": True, "b": True}, RunLog("up", "demo"))
    assert revisions.previous_revision("demo") == 7
    assert revisions.kept_on_hosts("demo", target) == first
    # 8 (target), 7 (where rollback returns), the newest three; 3 is no longer anyone's way back.
    assert first[0] == ["r6", "r7", "r8"]


def test_a_host_still_on_an_older_revision_keeps_it(state: Path) -> None:
    _write(state, {"a": 8, "b": 2}, {"a": 7, "b": 1}, range(1, 9))
    releases, bundles = revisions.kept_on_hosts("demo", revisions.Revision(**_rev(8)))
    assert releases == ["r2", "r6", "r7", "r8"]  # b runs 2: its rollback target after this run
    assert len(bundles) == 4


def test_a_rollback_keeps_the_revision_the_hosts_leave(state: Path) -> None:
    _write(state, {"a": 8}, {"a": 7}, range(1, 9))
    releases, _ = revisions.kept_on_hosts("demo", revisions.Revision(**_rev(2)))
    assert releases == ["r2", "r6", "r7", "r8"]
