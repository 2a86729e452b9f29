"""`installer up` refuses, before changing anything, when the hosts run a revision that this
control machine's state does not know (run from the wrong folder: a fresh state would replace
the hosts' client keys, CA and Redis password)."""

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.base import paths
from installer.bundle.manifest import FileEntry, Manifest
from installer.cli import _register, app
from installer.preflight import hosts as preflight
from installer.preflight.hosts import HostReport, Needs
from installer.preparation import prepare
from installer.state import revisions
from tests.support.revisions import anchored_site, known_revision, release_record, signed_bundle

runner = CliRunner()
_register()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as path:
        yield path


def test_the_probe_reads_release_json_into_one_fact(tmp_path: Path) -> None:
    record = {"deployment": "demo", "revision": 3, "config": "c" * 12, "bundle_id": "b" * 64}
    (tmp_path / "release.json").write_text(json.dumps(record, indent=4) + "\n")

    def probe(release_file: Path) -> dict[str, str]:
        env = {"PATH": "/usr/bin:/bin", "PLI_BUNDLE_DIR": str(tmp_path), "PLI_RELEASE_FILE": str(release_file)}
        out = subprocess.run(["sh", "-c", preflight._PROBE], env=env, capture_output=True, text=True, check=True)
        return preflight.parse_facts(out.stdout)

    assert json.loads(probe(tmp_path / "release.json")["release_json"]) == record
    assert probe(tmp_path / "absent.json")["release_json"] == ""


def test_hosts_are_judged_against_the_state(site: Path) -> None:
    rev = known_revision(site)
    judged = revisions.unknown_on_hosts(
        "demo",
        {
            "new": "",  # never installed
            "same": release_record(rev),
            "ahead": release_record(rev, revision=rev.number + 4),
            "other-bundle": release_record(rev, bundle_id="f" * 64),
            "other-deployment": release_record(rev, deployment="prod"),
            "garbled": "{not json",
        },
    )
    reasons = {u.host: u.reason for u in judged}
    assert set(reasons) == {"ahead", "other-bundle", "other-deployment", "garbled"}
    assert reasons["ahead"] == f"runs revision {rev.number + 4} (bundle {rev.bundle_id[:12]}), unknown here"
    assert f"revision {rev.number} here is bundle {rev.bundle_id[:12]}" in reasons["other-bundle"]
    assert reasons["other-deployment"] == "runs deployment 'prod', not 'demo'"
    assert "is not a release record" in reasons["garbled"]
    assert max(u.revision for u in judged) == rev.number + 4


def test_an_empty_state_knows_no_host_that_ran_anything(site: Path) -> None:
    rev = known_revision(site)
    paths.use_state_dir(site.parent / "fresh")  # as `up` from another folder would see it
    judged = revisions.unknown_on_hosts("demo", {"a": release_record(rev)})
    assert [u.host for u in judged] == ["a"]
    error = revisions.unknown_state_error("demo", judged)
    assert f"the state in {site.parent / 'fresh'} does not know" in str(error)
    assert any("every client key would stop working" in line for line in error.details)
    # The state that does know it is named, with the flag that uses it.
    paths.use_state_dir(None)
    (Path.cwd() / ".installer").mkdir()
    (Path.cwd() / ".installer" / "state.json").write_text((site.parent / ".installer" / "state.json").read_text())
    paths.use_state_dir(site.parent / "fresh")
    details = revisions.unknown_state_error("demo", judged).details
    knows = Path.cwd() / ".installer"
    assert f"{knows} knows deployment demo: `installer --state-dir {knows} up ...`" in details
    assert any("`installer up --adopt" in line for line in details)


class _Pushed(Exception):
    pass


@pytest.fixture
def hosts_at(site: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`installer up` up to the push, with each host's preflight facts given here."""
    seen: dict[str, Any] = {"facts": {}, "pushed": False}

    def run_preflight(inv: Any, needs: Needs) -> list[HostReport]:
        seen["release_file"] = needs.release_file
        return [HostReport(h.name, h.address, {"release_json": seen["facts"].get(h.name, "")}) for h in inv.hosts]

    def push(*_a: Any, **_k: Any) -> None:
        seen["pushed"] = True
        raise _Pushed

    monkeypatch.setattr(prepare, "run_preflight", run_preflight)
    monkeypatch.setattr(prepare.bundle_push, "push", push)
    seen["bundle"] = signed_bundle(site)
    return seen


def test_up_refuses_hosts_this_state_does_not_know_and_changes_nothing(site: Path, hosts_at: dict[str, Any]) -> None:
    rev = known_revision(site)
    hosts_at["facts"] = {"a": release_record(rev, revision=7), "b": ""}
    result = runner.invoke(app, ["up", "-i", str(site), "--bundle", str(hosts_at["bundle"])])
    assert isinstance(result.exception, revisions.StateError), result.output
    assert hosts_at["release_file"] == "/var/lib/private-llm/release.json"
    assert not hosts_at["pushed"]
    assert str(result.exception) == (
        f"1 host(s) run a revision the state in {site.parent / '.installer'} does not know; nothing was changed"
    )
    assert f"a: runs revision 7 (bundle {rev.bundle_id[:12]}), unknown here" in result.exception.details


def test_up_goes_on_for_hosts_it_knows(site: Path, hosts_at: dict[str, Any]) -> None:
    hosts_at["facts"] = {"a": release_record(known_revision(site)), "b": ""}
    result = runner.invoke(app, ["up", "-i", str(site), "--bundle", str(hosts_at["bundle"])])
    assert isinstance(result.exception, _Pushed), result.output


def test_up_adopt_takes_the_hosts_over_above_their_revision(site: Path, hosts_at: dict[str, Any]) -> None:
    rev = known_revision(site)
    hosts_at["facts"] = {"a": release_record(rev, revision=7)}
    result = runner.invoke(app, ["up", "-i", str(site), "--bundle", str(hosts_at["bundle"]), "--adopt"])
    assert isinstance(result.exception, _Pushed), result.output
    assert "adopting a" in result.output
    # The revision `up` then makes is numbered above what the adopted hosts ran.
    prepared = prepare.prepare(site, _Reporter(), bundle_path=hosts_at["bundle"], adopt=True, check=True)
    assert prepared.adopted_above == 7
    man = Manifest(target={}, components={}, packages=[], files=[FileEntry("wheels/y.whl", 1, "b" * 64)])
    above = prepared.adopted_above
    assert revisions.next_revision(prepared.inv, man, site.parent, prepared.playbooks_dir, above=above).number == 8


class _Reporter:
    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def note(self, text: str) -> None:
        pass

    def push_progress(self, host: str, sent: int, total: int) -> None:
        pass

    def task(self, host: str, task: str, status: str) -> None:
        pass
