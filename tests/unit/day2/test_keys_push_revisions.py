"""`installer keys create/revoke -i` send a key list that replaces every key on the gateways: it
is refused, before the key store or any host changes, when a host runs a revision this state does
not know (an empty state next to another copy of the inventory would revoke every other key).

SSH is stood in for at subprocess.run: the argv is the real one keys_push builds; each host
answers the release.json read with what the test says it runs, and a key file write is recorded.
The gateways' confirmation (/readyz, tests/integration/test_gateway_key_push.py with real
gateways) is stood in for by what the test says each gateway loaded.
"""

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.base import paths
from installer.cli import _register, app
from installer.flows import keys_push
from installer.hosts import remote
from installer.inventory import load_inventory
from installer.secrets import keys
from installer.state import revisions
from tests.support.revisions import anchored_site, known_revision, release_record

runner = CliRunner()
_register()

NAMES = {"10.0.0.1": "a", "10.0.0.2": "b"}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path) as path:
        yield path


class _Hosts:
    """Each host's release.json (None: the read fails), and the key files written to it."""

    def __init__(self) -> None:
        self.release: dict[str, str | None] = {"a": "", "b": ""}
        self.written: dict[str, dict[str, Any]] = {}
        self.quotas: dict[str, str] = {}
        self.not_taken: dict[str, str] = {}  # host -> why its gateway kept its old files

    def run(self, argv: list[str], *, input: bytes, **_kw: Any) -> subprocess.CompletedProcess[bytes]:
        assert argv[0] == "ssh" and argv[argv.index("--") + 1] in NAMES, argv
        host, script = NAMES[argv[argv.index("--") + 1]], argv[-1]
        if revisions.HOST_RELEASE_FILE in script:
            text = self.release[host]
            if text is None:
                return subprocess.CompletedProcess(argv, 255, b"", b"ssh: connect to host: No route to host")
            return subprocess.CompletedProcess(argv, 0, text.encode(), b"")
        assert "keys.json" in script, script
        self.written[host] = json.loads(input)
        self.quotas[host] = script
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    def confirm(self, inv: Any, hosts: list[Any], want: dict[str, str]) -> list[str]:
        assert {h.name for h in hosts} <= set(self.written)
        assert set(want) == {"keys_sha256", "quotas_sha256", "roles_sha256"}
        return [f"{h.name}: {self.not_taken[h.name]}" for h in hosts if h.name in self.not_taken]


@pytest.fixture
def hosts(monkeypatch: pytest.MonkeyPatch) -> _Hosts:
    fake = _Hosts()
    ssh = SimpleNamespace(run=fake.run, TimeoutExpired=subprocess.TimeoutExpired)
    monkeypatch.setattr(remote, "subprocess", ssh)
    monkeypatch.setattr(keys_push, "confirm", fake.confirm)
    return fake


def _names(written: dict[str, Any]) -> set[str]:
    return {k["name"] for k in written["keys"]}


def test_keys_create_from_an_empty_state_is_refused_before_anything_changes(
    site: Path, hosts: _Hosts, tmp_path: Path
) -> None:
    rev = known_revision(site)
    keys.create("team-a")
    hosts.release = {"a": release_record(rev), "b": ""}
    empty = tmp_path / "elsewhere" / ".installer"
    result = runner.invoke(app, ["--state-dir", str(empty), "keys", "create", "--name", "new", "-i", str(site)])
    assert isinstance(result.exception, revisions.StateError), result.output
    assert str(result.exception).startswith(f"1 host(s) run a revision the state in {empty} does not know")
    assert f"a: runs revision {rev.number} (bundle {rev.bundle_id[:12]}), unknown here" in result.exception.details
    assert any("`installer keys create --adopt" in line for line in result.exception.details)
    assert hosts.written == {}  # no gateway lost team-a
    assert "sk-" not in result.output  # no key was made, so no secret to lose
    paths.use_state_dir(empty)
    assert keys.load().keys == []


def test_keys_revoke_is_refused_on_a_host_running_an_unknown_revision_and_revokes_nothing(
    site: Path, hosts: _Hosts
) -> None:
    rev = known_revision(site)
    keys.create("team-a")
    hosts.release = {"a": release_record(rev), "b": release_record(rev, revision=rev.number + 6)}
    result = runner.invoke(app, ["keys", "revoke", "team-a", "-i", str(site)])
    assert isinstance(result.exception, revisions.StateError), result.output
    assert [line for line in result.exception.details if line.startswith("b:")] == [
        f"b: runs revision {rev.number + 6} (bundle {rev.bundle_id[:12]}), unknown here"
    ]
    assert any("`installer keys revoke --adopt" in line for line in result.exception.details)
    assert hosts.written == {}
    assert [k.status(k.created) for k in keys.load().keys] == ["active"]


def test_keys_create_sends_the_whole_list_to_hosts_this_state_knows(site: Path, hosts: _Hosts) -> None:
    rev = known_revision(site)
    keys.create("team-a")
    hosts.release = {"a": release_record(rev), "b": ""}  # b not installed yet: nothing there to lose
    result = runner.invoke(app, ["keys", "create", "--name", "new", "-i", str(site)])
    assert result.exit_code == 0, result.output
    assert {h: _names(w) for h, w in hosts.written.items()} == {"a": {"team-a", "new"}, "b": {"team-a", "new"}}
    assert "the gateways of a, b have it now" in result.output


def test_adopt_sends_it_anyway_and_says_so(site: Path, hosts: _Hosts, tmp_path: Path) -> None:
    rev = known_revision(site)
    hosts.release = {"a": release_record(rev), "b": release_record(rev)}
    empty = tmp_path / "elsewhere" / ".installer"
    result = runner.invoke(
        app, ["--state-dir", str(empty), "keys", "create", "--name", "new", "-i", str(site), "--adopt"]
    )
    assert result.exit_code == 0, result.output
    assert "adopting a: runs revision" in result.output and "adopting b: runs revision" in result.output
    assert {h: _names(w) for h, w in hosts.written.items()} == {"a": {"new"}, "b": {"new"}}


def test_a_host_whose_record_cannot_be_read_is_not_written(site: Path, hosts: _Hosts) -> None:
    rev = known_revision(site)
    hosts.release = {"a": release_record(rev), "b": None}
    with pytest.raises(keys_push.KeyPushError) as err:
        keys_push.push(load_inventory(site))
    assert list(hosts.written) == ["a"]
    assert err.value.details[:-1] == ["b: could not read its release record: ssh: connect to host: No route to host"]


def test_the_check_judges_each_host_as_up_does(site: Path, hosts: _Hosts) -> None:
    rev = known_revision(site)
    inv = load_inventory(site)
    hosts.release = {"a": release_record(rev), "b": "{not json"}
    with pytest.raises(revisions.StateError) as err:
        keys_push.check(inv)
    assert any(line.startswith("b: its /var/lib/private-llm/release.json is not a release record") for line in
               err.value.details)
    hosts.release = {"a": release_record(rev), "b": release_record(rev)}
    checked = keys_push.check(inv)
    assert [h.name for h in checked.hosts] == ["a", "b"] and checked.adopted == checked.unreadable == []


def test_a_gateway_that_did_not_take_the_revocation_is_named_and_the_command_fails(
    site: Path, hosts: _Hosts
) -> None:
    rev = known_revision(site)
    keys.create("leaked", quota_tokens=100, quota_period="day")
    hosts.release = {"a": release_record(rev), "b": release_record(rev)}
    hosts.not_taken = {"b": "its gateway does not report the key file it loaded (a release before this one)"}
    result = runner.invoke(app, ["keys", "revoke", "leaked", "-i", str(site)])
    assert result.exit_code != 0
    assert isinstance(result.exception, keys_push.KeyPushError)
    assert "did not take the new key file: a revoked key may still work there" in str(result.exception)
    assert result.exception.details[0] == hosts.not_taken["b"].join(("b: ", ""))
    # the quotas travel apart from keys.json, which an older gateway reads
    assert hosts.written["b"]["keys"] == [] and "quotas.json" in hosts.quotas["b"]
