"""Day-2 bookkeeping: revisions are reused for the same (bundle, inventory) and numbered for a
new one, each with a snapshot that rebuilds the inventory; hosts' previous revisions; batches;
socket activation only for the process systemd meant."""

import os
import socket
from pathlib import Path

import pytest

from installer.bundle.manifest import FileEntry, Manifest
from installer.day2 import revisions, rolling
from installer.day2.records import HostRecord
from installer.inventory import load_inventory
from installer.runlog import RunLog
from service.activation import inherited_socket


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("---\n")
    return tmp_path


def _inventory(root: Path, seqs: int) -> Path:
    path = root / f"site-{seqs}.yml"
    path.write_text(
        "deployment: demo\nhosts: [{name: a, address: 10.0.0.1}, {name: b, address: 10.0.0.2}]\n"
        f"model: {{path: weights, served_name: tiny}}\nengine: {{device: cpu, max_num_seqs: {seqs}}}\n"
    )
    return path


def _manifest(content: str) -> Manifest:
    return Manifest(target={}, components={}, packages=[], files=[FileEntry("wheels/x.whl", 1, content * 64)])


def test_same_bundle_and_inventory_is_the_same_revision(state: Path) -> None:
    inv = load_inventory(_inventory(state, 8))
    first = revisions.next_revision(inv, _manifest("a"), state, state / "playbooks")
    again = revisions.next_revision(inv, _manifest("a"), state, state / "playbooks")
    assert first == again and first.number == 1
    playbooks = state / "playbooks"
    new_bundle = revisions.next_revision(inv, _manifest("b"), state, playbooks)
    new_setting = revisions.next_revision(load_inventory(_inventory(state, 16)), _manifest("b"), state, playbooks)
    assert (new_bundle.number, new_setting.number) == (2, 3)
    # The snapshot is enough to configure that revision again.
    assert new_setting.inventory().engine.max_num_seqs == 16
    assert new_setting.manifest().bundle_id == _manifest("b").bundle_id
    assert (new_setting.playbooks_dir / "site.yml").is_file()
    assert new_setting.host_vars()["release_revision"] == 3


def test_hosts_remember_the_revision_before(state: Path) -> None:
    inv = load_inventory(_inventory(state, 8))
    r1 = revisions.next_revision(inv, _manifest("a"), state, state / "playbooks")
    r2 = revisions.next_revision(inv, _manifest("b"), state, state / "playbooks")
    log = RunLog("up", "demo")
    revisions.record("demo", r1, {"a": True, "b": True}, log)
    assert revisions.previous_revision("demo") is None
    revisions.record("demo", r2, {"a": True, "b": False}, log)  # b failed its gate
    assert revisions.host_revisions("demo") == {"a": 2, "b": 1}
    assert revisions.previous_revision("demo") == 1
    revisions.record("demo", r2, {"b": True}, log)
    assert revisions.host_revisions("demo") == {"a": 2, "b": 2}
    with pytest.raises(revisions.StateError, match="no revision 7"):
        revisions.get("demo", 7)


def test_batches_keep_the_inventory_order() -> None:
    assert rolling.batches([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]  # type: ignore[list-item]


def test_drift_says_which_side_disagrees() -> None:
    assert HostRecord("a", 3, 3, "r-1").drift == "none"
    assert HostRecord("a", 3, 2, "r-1").drift == "state.json says 3, host says 2"
    assert HostRecord("a", 3, None, "", "timeout").drift.startswith("unknown")


def test_only_the_process_systemd_meant_takes_the_socket() -> None:
    assert inherited_socket({"LISTEN_PID": "1", "LISTEN_FDS": "1"}) is None  # another process's
    assert inherited_socket({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) is None
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    saved = os.dup(3) if _open(3) else None
    os.dup2(listener.fileno(), 3)
    try:
        env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1"}
        sock = inherited_socket(env)
        assert sock is not None and sock.getsockname() == listener.getsockname()
        assert sock.family == socket.AF_INET and env == {}  # not passed on to children
        sock.detach()
    finally:
        if saved is not None:
            os.dup2(saved, 3)
            os.close(saved)
        else:
            os.close(3)
        listener.close()


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


class _FakeHosts:
    """Stands in for SSH and Ansible around rolling.roll: records the order of operations."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.events: list[str] = []

    def set_drained(self, _inv: object, names: list[str]) -> None:
        self.events.append(f"drain {','.join(names) or '-'}")

    def wait_idle(self, _inv: object, names: list[str], _timeout: float) -> float:
        self.events.append(f"idle {','.join(names)}")
        return 0.1

    def configure(self, rev: revisions.Revision, hosts: list, _log: object, _label: str, _t: object) -> object:
        names = [h.name for h in hosts]
        self.events.append(f"configure rev{rev.number} {','.join(names)}")
        return (rev.number, names)

    def gate(self, rev: revisions.Revision, pb: tuple[int, list[str]], hosts: list, _secret: str) -> dict[str, str]:
        number, names = pb
        return {n: "engine did not start" for n in names if n in self.failing and number == 3}


def _roll_setup(state: Path, monkeypatch: pytest.MonkeyPatch, failing: set[str]) -> tuple[_FakeHosts, RunLog]:
    fake = _FakeHosts(failing)
    monkeypatch.setattr(rolling.drain, "set_drained", fake.set_drained)
    monkeypatch.setattr(rolling.drain, "wait_idle", fake.wait_idle)
    monkeypatch.setattr(rolling, "_configure", fake.configure)
    monkeypatch.setattr(rolling, "_gate", fake.gate)
    monkeypatch.setattr(rolling.keys, "ensure_probe_key", lambda: "sk-test")
    inv = load_inventory(_inventory(state, 8))
    log = RunLog("upgrade", "demo")
    for n, content in ((1, "a"), (2, "b"), (3, "c")):
        rev = revisions.next_revision(inv, _manifest(content), state, state / "playbooks")
        assert rev.number == n
    revisions.record("demo", revisions.get("demo", 2), {"a": True, "b": True}, log)
    return fake, log


def test_roll_drains_configures_gates_and_readmits_host_by_host(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, log = _roll_setup(state, monkeypatch, failing=set())
    result = rolling.roll(revisions.get("demo", 3), log)
    assert result.success and [s.action for s in result.steps] == ["upgraded", "upgraded"]
    assert fake.events == [
        "drain a", "idle a", "configure rev3 a", "drain -",
        "drain b", "idle b", "configure rev3 b", "drain -",
        "drain -",
    ]
    assert revisions.host_revisions("demo") == {"a": 3, "b": 3}
    fake.events.clear()  # a second run finds every host at the target
    again = rolling.roll(revisions.get("demo", 3), log)
    assert [s.action for s in again.steps] == ["unchanged", "unchanged"] and fake.events == ["drain -"]


def test_a_failed_gate_rolls_the_host_back_and_stops(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, log = _roll_setup(state, monkeypatch, failing={"a"})
    result = rolling.roll(revisions.get("demo", 3), log)
    assert not result.success and result.stopped_at == "a"
    assert [(s.name, s.action, s.after) for s in result.steps] == [("a", "rolled back", 2), ("b", "not touched", 2)]
    assert fake.events == ["drain a", "idle a", "configure rev3 a", "configure rev2 a", "drain -"]
    assert revisions.host_revisions("demo") == {"a": 2, "b": 2}  # nobody recorded at 3
