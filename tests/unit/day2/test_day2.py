"""Day-2 bookkeeping: revisions are reused for the same (bundle, inventory) and numbered for a
new one, each with a snapshot that rebuilds the inventory; hosts' previous revisions; batches;
socket activation only for the process systemd meant."""

import json
import os
import shlex
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from installer.ansible.runner import HostResult, PlaybookResult
from installer.base.errors import AnsibleError
from installer.base.runlog import RunLog
from installer.bundle.manifest import FileEntry, Manifest
from installer.day2 import drain, gate, rolling
from installer.day2.records import HostRecord
from installer.hosts.prove import Proof
from installer.inventory import Host, load_inventory
from installer.state import revisions
from service.activation import inherited_socket


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("---\n")
    return tmp_path


TWO_HOSTS = "[{name: a, address: 10.0.0.1}, {name: b, address: 10.0.0.2}]"


def _inventory(root: Path, seqs: int, hosts: str = TWO_HOSTS) -> Path:
    path = root / f"site-{seqs}.yml"
    path.write_text(
        f"deployment: demo\nhosts: {hosts}\n"
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
    hosts = [SimpleNamespace(name=str(n)) for n in range(1, 6)]
    got = rolling.batches(hosts, 2)  # type: ignore[arg-type]
    assert [[h.name for h in b] for b in got] == [["1", "2"], ["3", "4"], ["5"]]


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
    """Stands in for SSH, Ansible and the gateways around rolling.roll: records the order of
    operations, and keeps each gateway's drain list so that a proof through a gateway is
    answered by the engines that gateway would really route to."""

    def __init__(self, play_failing: frozenset[str] = frozenset(), serve_failing: frozenset[str] = frozenset()) -> None:
        self.play_failing = play_failing  # the engine does not start on these hosts at revision 3
        self.serve_failing = serve_failing  # it starts, but its answers fail, at revision 3
        self.events: list[str] = []
        self.drained_on: dict[str, set[str]] = {"a": set(), "b": set()}
        self.running: dict[str, int] = {"a": 2, "b": 2}
        self.answered_by: list[tuple[str, set[str]]] = []  # (gateway host, engines it could pick)

    def set_drained(self, _inv: object, names: list[str], hosts: list | None = None) -> None:
        where = [h.name for h in hosts] if hosts is not None else list(self.drained_on)
        for name in where:
            self.drained_on[name] = set(names)
        self.events.append(f"drain {','.join(names) or '-'}" + (f" on {','.join(where)}" if hosts else ""))

    def wait_idle(self, _inv: object, names: list[str], _timeout: float) -> float:
        self.events.append(f"idle {','.join(names)}")
        return 0.1

    def routable(self, gateway: str) -> set[str]:
        return {"a", "b"} - self.drained_on[gateway]

    def wait_routing(self, _inv: object, host: Host, want: dict[str, bool], _timeout: float) -> float:
        self.events.append(f"wait {host.name}: " + " ".join(f"{'+' if ok else '-'}{n}" for n, ok in want.items()))
        wrong = [n for n, ok in want.items() if (n in self.routable(host.name)) != ok]
        if wrong:
            raise rolling.drain.DrainError(f"the gateway on {host.name} did not route as asked", wrong)
        return 0.0

    def configure(self, target: rolling.Planned, hosts: list, _log: object, _label: str, _t: object) -> PlaybookResult:
        rev = target.rev
        names = [h.name for h in hosts]
        self.events.append(f"configure rev{rev.number} {','.join(names)}")
        results = {}
        for n in names:
            self.running[n] = rev.number
            broken = n in self.play_failing and rev.number == 3
            results[n] = HostResult(n, failed=int(broken), error="engine did not start" if broken else "")
        return PlaybookResult("failed" if any(r.failed for r in results.values()) else "successful",
                              int(any(r.failed for r in results.values())) * 2, results, Path("/nonexistent"))

    def prove_host(self, base: str, host: str, _model: str, _secret: str, **_kw: object) -> Proof:
        engines = self.routable(host)
        self.answered_by.append((host, engines))
        self.events.append(f"prove via {host}: {','.join(sorted(engines)) or 'nothing'}")
        if not engines:
            return Proof(host, base, False, "gateway /readyz answered 503")
        broken = [e for e in engines if e in self.serve_failing and self.running[e] == 3]
        return Proof(host, base, not broken, "chat completion through the gateway: 502" if broken else "ok")


def _roll_setup(
    state: Path, monkeypatch: pytest.MonkeyPatch, hosts: str = TWO_HOSTS, **failing: frozenset[str]
) -> tuple[_FakeHosts, RunLog]:
    fake = _FakeHosts(**failing)
    monkeypatch.setattr(rolling.drain, "set_drained", fake.set_drained)
    monkeypatch.setattr(rolling.drain, "wait_idle", fake.wait_idle)
    monkeypatch.setattr(rolling.drain, "wait_routing", fake.wait_routing)
    monkeypatch.setattr(rolling, "_configure", fake.configure)
    monkeypatch.setattr(gate.prove, "prove_host", fake.prove_host)
    monkeypatch.setattr(gate.prove, "ca_file", lambda _inv: None)
    monkeypatch.setattr(gate, "PROOF_PAUSE_S", 0)
    monkeypatch.setattr(rolling.keys, "ensure_probe_key", lambda: "sk-test")
    inv = load_inventory(_inventory(state, 8, hosts))
    log = RunLog("upgrade", "demo")
    for n, content in ((1, "a"), (2, "b"), (3, "c")):
        rev = revisions.next_revision(inv, _manifest(content), state, state / "playbooks")
        assert rev.number == n
    revisions.record("demo", revisions.get("demo", 2), {"a": True, "b": True}, log)
    # The proof is asked on the host's address: the fake names the gateway by its host.
    monkeypatch.setattr(gate.prove, "gateway_base", lambda _inv, address: {"10.0.0.1": "a", "10.0.0.2": "b"}[address])
    return fake, log


def test_roll_drains_configures_readmits_on_its_own_gateway_gates_and_readmits(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, log = _roll_setup(state, monkeypatch)
    result = rolling.roll(revisions.get("demo", 3), log)
    assert result.success and [s.action for s in result.steps] == ["upgraded", "upgraded"]
    assert fake.events == [
        "drain a", "idle a", "configure rev3 a",
        "drain - on a", "wait a: +a", "drain b on a", "wait a: +a -b", "prove via a: a", "drain - on a",
        "drain -",
        "drain b", "idle b", "configure rev3 b",
        "drain - on b", "wait b: +b", "drain a on b", "wait b: -a +b", "prove via b: b", "drain - on b",
        "drain -",
        "drain -",
    ]
    # Each proof could be answered by the upgraded host's own engine and nothing else.
    assert fake.answered_by == [("a", {"a"}), ("b", {"b"})]
    assert revisions.host_revisions("demo") == {"a": 3, "b": 3}
    fake.events.clear()  # a second run finds every host at the target
    again = rolling.roll(revisions.get("demo", 3), log)
    assert [s.action for s in again.steps] == ["unchanged", "unchanged"] and fake.events == ["drain -"]


def test_a_batch_of_every_host_is_proven_through_each_own_gateway(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every engine drained at once (one serving host, or --batch >= hosts): the gateways have
    no other engine, so each host's own engine must be re-admitted there before its proof."""
    fake, log = _roll_setup(state, monkeypatch)
    result = rolling.roll(revisions.get("demo", 3), log, batch_size=2)
    assert result.success, result.steps
    assert fake.events == [
        "drain a,b", "idle a,b", "configure rev3 a,b",
        "drain b on a", "wait a: +a", "drain b on a", "wait a: +a -b", "prove via a: a", "drain b on a",
        "drain a on b", "wait b: +b", "drain a on b", "wait b: -a +b", "prove via b: b", "drain a on b",
        "drain -",
        "drain -",
    ]
    assert fake.answered_by == [("a", {"a"}), ("b", {"b"})]
    assert revisions.host_revisions("demo") == {"a": 3, "b": 3}


def test_an_engine_that_fails_through_its_gateway_is_caught_and_rolled_back(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The play passes (the engine answers on its host) but a request through the gateway
    fails: proven on the host's own engine, not answered by the other host's."""
    fake, log = _roll_setup(state, monkeypatch, serve_failing=frozenset("a"))
    result = rolling.roll(revisions.get("demo", 3), log)
    assert not result.success and result.stopped_at == "a"
    assert [(s.name, s.action, s.after) for s in result.steps] == [("a", "rolled back", 2), ("b", "not touched", 2)]
    assert "alone behind the gateway on a" in result.steps[0].detail
    assert fake.events == [
        "drain a", "idle a", "configure rev3 a",
        "drain - on a", "wait a: +a", "drain b on a", "wait a: +a -b",
        *["prove via a: a"] * gate.PROOF_ATTEMPTS,
        "drain a on a",  # at once no client of its own gateway is sent to it
        # that gateway routed clients to it during the gate: drained everywhere before the rollback
        "drain a", "idle a", "configure rev2 a",
        "drain - on a", "wait a: +a", "drain b on a", "wait a: +a -b", "prove via a: a", "drain - on a",
        "drain -",
    ]
    assert revisions.host_revisions("demo") == {"a": 2, "b": 2}  # nobody recorded at 3


def test_a_failed_play_rolls_back_without_readmitting_anywhere(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, log = _roll_setup(state, monkeypatch, play_failing=frozenset("a"))
    result = rolling.roll(revisions.get("demo", 3), log)
    assert not result.success and result.stopped_at == "a"
    assert [(s.name, s.action, s.after) for s in result.steps] == [("a", "rolled back", 2), ("b", "not touched", 2)]
    assert result.steps[0].detail.startswith("engine did not start")
    assert fake.events[:6] == ["drain a", "idle a", "configure rev3 a", "drain a", "idle a", "configure rev2 a"]
    assert fake.events[-1] == "drain -" and fake.answered_by == [("a", {"a"})]  # only rev 2 was proven
    assert revisions.host_revisions("demo") == {"a": 2, "b": 2}


def test_day_two_plays_leave_the_gateway_wait_to_the_gate(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The play's /readyz wait is 503 while every engine is drained; the gate replaces it."""
    seen: dict[str, object] = {}

    def run_playbook(playbook: str, inv_dir: Path, run_dir: Path, **kw: object) -> PlaybookResult:
        seen.update(kw, playbook=playbook)
        return PlaybookResult("successful", 0, {}, run_dir)

    _roll_setup(state, monkeypatch)
    monkeypatch.undo()  # the real _configure, with ansible-playbook itself stood in for
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(state / "state"))
    monkeypatch.setattr(rolling, "run_playbook", run_playbook)
    monkeypatch.setattr(rolling.render, "write", lambda *_a, **_k: state / "inv")
    rev = revisions.get("demo", 3)
    rolling._configure(rolling.Planned.of(rev), rev.inventory().hosts, RunLog("upgrade", "demo"), "batch-1",
                       lambda *_: None)
    assert shlex.split(str(seen["extra_cmdline"])) == ["--limit", "a,b", "-e", '{"healthcheck_gateway_url": ""}']


@pytest.fixture
def readyz(tmp_path: Path) -> Iterator[tuple[Path, list[dict]]]:
    """A real HTTP server on loopback answering /readyz with the next queued body (the last
    one again once the queue is down to it), and an inventory whose one host is that gateway."""
    answers: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answers.pop(0) if len(answers) > 1 else answers[0]).encode()
            self.send_response(200 if any(json.loads(body).get("engines", {}).values()) else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    path = tmp_path / "gw.yml"
    path.write_text(
        "deployment: demo\nhosts: [{name: a, address: 127.0.0.1}]\ntls: {mode: 'off'}\n"
        f"ports: {{gateway: {server.server_address[1]}}}\nmodel: {{path: weights, served_name: tiny}}\n"
        "engine: {device: cpu}\n"
    )
    yield path, answers
    server.shutdown()
    server.server_close()


def test_wait_routing_waits_for_the_gateways_own_word(readyz: tuple[Path, list[dict]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path, answers = readyz
    monkeypatch.setattr(drain, "REREAD_S", 0)
    monkeypatch.setattr(drain, "POLL_S", 0.01)
    inv = load_inventory(path)
    host = inv.hosts[0]
    # Not yet checked, then still routing to b as well, then pinned to a alone.
    answers += [{"engines": {"a": False, "b": True}}, {"engines": {"a": True, "b": True}},
                {"engines": {"a": True, "b": False}}]
    drain.wait_routing(inv, host, {"a": True, "b": False}, timeout_s=5)
    assert answers == [{"engines": {"a": True, "b": False}}]  # it asked until the last answer
    answers[:] = [{"engines": {"a": False, "b": True}}]
    with pytest.raises(drain.DrainError, match="did not route as asked") as err:
        drain.wait_routing(inv, host, {"a": True, "b": False}, timeout_s=0.2)
    assert err.value.details == ["a: a not ready", "a: b ready"]


MONITOR_APART = TWO_HOSTS[:-1] + ", {name: m, address: 10.0.0.3, groups: [monitoring]}]"
MONITOR_ON_B = "[{name: a, address: 10.0.0.1}, {name: b, address: 10.0.0.2, groups: [serving, monitoring]}]"


def test_an_upgrade_configures_the_monitoring_only_host_before_the_first_drain(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upgraded gateways answer /metrics only to Prometheus's scrape token: the monitoring host
    gets the new scrape configuration before any gateway is touched (old ones ignore the header)."""
    fake, log = _roll_setup(state, monkeypatch, MONITOR_APART)
    result = rolling.roll(revisions.get("demo", 3), log)
    assert result.success, result.steps
    assert fake.events[:2] == ["configure rev3 m", "drain a"]
    assert [e for e in fake.events if e.startswith("configure")] == [
        "configure rev3 m", "configure rev3 a", "configure rev3 b"
    ]
    first = result.steps[0]
    assert (first.name, first.action, first.after) == ("m", "configured", 3)
    assert revisions.host_revisions("demo") == {"a": 3, "b": 3}


def test_a_monitoring_host_that_fails_stops_the_upgrade_before_any_gateway(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, log = _roll_setup(state, monkeypatch, MONITOR_APART, play_failing=frozenset("m"))
    with pytest.raises(AnsibleError, match="no serving host was touched") as err:
        rolling.roll(revisions.get("demo", 3), log)
    assert "m: engine did not start" in err.value.details
    assert fake.events == ["configure rev3 m"]  # nothing drained, no gateway configured
    assert revisions.host_revisions("demo") == {"a": 2, "b": 2}


def test_a_rollback_configures_the_monitoring_only_host_after_the_last_gateway(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older revision's Prometheus may send no token: newer gateways would refuse it, so it
    comes last, once every gateway runs the older revision."""
    fake, log = _roll_setup(state, monkeypatch, MONITOR_APART)
    revisions.record("demo", revisions.get("demo", 3), {"a": True, "b": True}, log)
    fake.running.update(a=3, b=3)
    result = rolling.roll(revisions.get("demo", 2), log)
    assert result.success, result.steps
    assert [e for e in fake.events if e.startswith("configure")] == [
        "configure rev2 a", "configure rev2 b", "configure rev2 m"
    ]
    assert fake.events[-1] == "configure rev2 m"
    assert (result.steps[-1].name, result.steps[-1].action) == ("m", "configured")


def test_a_serving_host_that_monitors_goes_first_up_and_last_down(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own batch's play configures its Prometheus: no separate run, but the batch order puts
    it before every other gateway on an upgrade, after them on a rollback."""
    fake, log = _roll_setup(state, monkeypatch, MONITOR_ON_B)
    assert rolling.roll(revisions.get("demo", 3), log).success
    assert [e for e in fake.events if e.startswith("configure")] == ["configure rev3 b", "configure rev3 a"]
    fake.events.clear()
    assert rolling.roll(revisions.get("demo", 2), log).success
    assert [e for e in fake.events if e.startswith("configure")] == ["configure rev2 a", "configure rev2 b"]


def test_without_a_monitoring_group_the_first_host_monitors_and_nothing_else_runs(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, log = _roll_setup(state, monkeypatch)
    assert rolling.roll(revisions.get("demo", 3), log).success
    assert [e for e in fake.events if e.startswith("configure")] == ["configure rev3 a", "configure rev3 b"]


def test_a_readyz_without_details_is_never_read_as_drained(readyz: tuple[Path, list[dict]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway shows its engines only to the scrape token: an answer without them (the token
    refused) says nothing of what is outstanding, so the wait goes on and says why."""
    path, answers = readyz
    monkeypatch.setattr(drain, "REREAD_S", 0)
    monkeypatch.setattr(drain, "POLL_S", 0.01)
    inv = load_inventory(path)
    answers[:] = [{"status": "ready"}]
    with pytest.raises(drain.DrainError) as err:
        drain.wait_idle(inv, ["a"], timeout_s=0.2)
    assert any("scrape token" in d for d in err.value.details), err.value.details
