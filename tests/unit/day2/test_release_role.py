"""The `release` role for real (ansible-playbook, connection local): each host's release.json
says which revision it runs and which it ran before, and re-applying changes nothing."""

import json
from pathlib import Path

from tests.support.roles import msgs, play


def _apply(tmp: Path, revision: int) -> tuple[int, dict]:
    r, stats, results = play(
        tmp, device="cpu", roles=["release"], pli_deployment="demo", pli_release_id="r-abc",
        release_revision=revision, release_config="c0ffee", release_bundle_id="b" * 64,
    )
    assert r.rc == 0, msgs(results)
    return sum((stats.get("changed") or {}).values()), json.loads((tmp / "state" / "release.json").read_text())


def test_release_record_keeps_the_previous_revision(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    changed, rec = _apply(tmp_path, 1)
    assert changed == 1 and (rec["revision"], rec["previous_revision"]) == (1, None)
    assert rec["release_id"] == "r-abc" and rec["deployment"] == "demo"
    changed, rec = _apply(tmp_path, 1)
    assert changed == 0  # the same revision again: nothing to write
    _, rec = _apply(tmp_path, 2)
    assert (rec["revision"], rec["previous_revision"]) == (2, 1)
    _, rec = _apply(tmp_path, 2)
    assert (rec["revision"], rec["previous_revision"]) == (2, 1)


def test_old_releases_and_bundles_are_removed_but_never_the_running_one(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    releases, bundles = tmp_path / "root" / "releases", tmp_path / "bundles"
    for d in (releases / "r-abc", releases / "r-prev", releases / "r-old", bundles / "b-now",
              bundles / "b-prev", bundles / "b-old", tmp_path / "bundle"):
        d.mkdir(parents=True)
    r, _stats, results = play(
        tmp_path, device="cpu", roles=["release"], pli_deployment="demo", pli_release_id="r-abc",
        release_revision=5, release_config="c0ffee", release_bundle_id="b" * 64,
        release_bundles_dir=str(bundles), release_keep_releases=["r-prev"],
        release_keep_bundles=[str(bundles / "b-prev")], pli_bundle_dir=str(bundles / "b-now"),
    )
    assert r.rc == 0, msgs(results)
    assert sorted(p.name for p in releases.iterdir()) == ["r-abc", "r-prev"]
    assert sorted(p.name for p in bundles.iterdir()) == ["b-now", "b-prev"]
