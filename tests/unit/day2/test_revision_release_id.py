"""A revision recorded while the weights were part of the release id is reused for the same
bundle with the id the hosts get now (what `release start` compares the bundle with)."""

import json
from pathlib import Path

import pytest

from installer.bundle.manifest import FileEntry, Manifest
from installer.inventory import load_inventory
from installer.state import revisions


def test_a_reused_revision_takes_the_release_id_of_todays_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("---\n")
    site = tmp_path / "site.yml"
    site.write_text("deployment: demo\nhosts: [{name: a, address: 10.0.0.1}]\n"
                    "model: {path: weights, served_name: tiny}\nengine: {device: cpu}\n")
    inv = load_inventory(site)
    man = Manifest({}, {}, [], [FileEntry("wheels/x.whl", 1, "a" * 64), FileEntry("model/w", 1, "b" * 64)])
    first = revisions.next_revision(inv, man, tmp_path, tmp_path / "playbooks")
    path = tmp_path / "state" / "state.json"
    data = json.loads(path.read_text())
    data["deployments"]["demo"]["revisions"][0]["release_id"] = "r-weightsrule"  # as recorded before
    path.write_text(json.dumps(data))
    again = revisions.next_revision(inv, man, tmp_path, tmp_path / "playbooks")
    assert again.number == first.number and again.release_id == man.release_id
    assert revisions.get("demo", first.number).release_id == man.release_id  # kept in state.json
