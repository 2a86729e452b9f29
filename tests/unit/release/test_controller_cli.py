"""`installer release start|watch|promote|abort` through the release controller (#35 item 1),
against a real password-protected redis-server: the control machine's requests run
service/release_admin.py as the controller's host would (only SSH is left out: the command the
host would run is checked, then run here with the host's settings file), and a Controller of
service/release_controller.py decides on recorded Prometheus answers.

  - Redis's scripts: one release at a time, abort and promote fence the leading controller out,
    a promote of a step the controller already left is refused;
  - start refuses while the controller runs a release, before any host is touched;
  - watch shows the controller's decisions and ends at its verdict, status shows its state;
  - promote reads the verdict first (a rolled-back canary is refused) and steps through it;
  - abort stops the controller before the stages file changes, then takes the release out.
"""

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from installer.base.runlog import RunLog
from installer.cli import _register, app
from installer.hosts import remote
from installer.inventory import load_inventory
from installer.release import abort, controller, promote, scrape, state
from installer.release.scrape import Scrape
from installer.release.state import Release, ReleaseError
from installer.state import revisions
from service import release_store
from service.release_controller import Audit, Controller
from service.release_store import Fenced, Refused, Store
from tests.support.recorded_prometheus import answers as _answers
from tests.support.redis_server import redis_server
from tests.support.revisions import anchored_site, known_revision

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()
_register()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    password = secrets.token_hex(16)
    (tmp_path / "redis").mkdir()
    with redis_server(tmp_path / "redis", ["--save", "", "--appendonly", "no", "--requirepass", password]) as url:
        yield url.replace("redis://", f"redis://:{password}@")


@pytest.fixture
def host(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The controller's host: its settings file, and every request the control machine sent it."""
    settings = tmp_path / "release-controller.json"
    settings.write_text(json.dumps({"redis_url": redis_url, "prometheus_url": "http://127.0.0.1:9",
                                    "audit_log": str(tmp_path / "decisions.jsonl"), "lease_ms": 10_000}))
    settings.chmod(0o600)
    sent: list[tuple[str, dict[str, Any]]] = []

    def run_one(t: Any, command: str, *, stdin: bytes = b"", timeout: float = 60) -> remote.Result:
        assert command == controller.ADMIN  # what the host runs, as root, over SSH
        sent.append((t.name, json.loads(stdin)))
        p = subprocess.run([sys.executable, "-m", "service.release_admin", "--settings", str(settings)],
                           input=stdin, capture_output=True, timeout=timeout, check=False,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        return remote.Result(t.name, p.returncode, p.stdout, p.stderr.decode()[-300:], 0.0)

    monkeypatch.setattr(controller.remote, "run_one", run_one)
    return {"settings": settings, "sent": sent, "client": redis.Redis.from_url(redis_url),
            "audit": tmp_path / "decisions.jsonl"}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as path:
        yield path


def _released(site: Path) -> Release:
    """Revision 1 installed, a canary revision beside it, and its release recorded at 20%."""
    stable = known_revision(site)
    revisions.record("demo", stable, {"a": True, "b": True}, RunLog("up", "demo"))
    canary = revisions.next_revision(load_inventory(site), stable.manifest(), site.parent, site.parent / "playbooks",
                                     canary="main", canary_over=stable.number)
    r = Release("main", "tiny-llama", stable.number, canary.number, (20, 50, 100), step=0, step_since=0,
                controller=f"demo/main/r{canary.number}")
    state.save("demo", r)
    return r


def _spec(release: str, steps: tuple[int, ...] = (20, 50, 100)) -> dict[str, Any]:
    return {"id": release, "model": "main", "served_name": "tiny-llama", "steps": list(steps), "dwell_s": 60,
            "auto_promote": False, "canary_engines": [],
            "slo": {"window_s": 120, "min_requests": 20, "relative": True, "error_ratio_margin": 0.02,
                    "ttft_p99_ratio": 1.5, "e2e_p95_ratio": 1.5, "latency_floor_s": 0.8,
                    "absolute": ["e2e_p95 <= 800 ms over 2 min"]}}


def _leader(host: dict[str, Any], answers: str) -> Controller:
    """A controller on the monitoring host, holding the lease once it ticked."""
    return Controller(Store(host["client"], "mon1", lease_ms=10_000), _answers(answers), Audit(host["audit"]))


def _taken(site: Path, host: dict[str, Any], answers: str) -> tuple[Release, Controller]:
    """A release started through the controller (its spec in Redis), its leader after one tick."""
    r = _released(site)
    controller.start(load_inventory(site), _spec(r.controller))
    leader = _leader(host, answers)
    leader.tick()
    return r, leader


def _state(host: dict[str, Any]) -> dict[str, Any]:
    return json.loads(host["client"].get(release_store.STATE))


def _error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, ReleaseError), result.output
    return " ".join([str(result.exception), *result.exception.details])


def test_redis_runs_one_release_and_the_installer_fences_the_controller_out(host: dict[str, Any]) -> None:
    client = host["client"]
    release_store.push_spec(client, _spec("demo/main/r2"))
    with pytest.raises(Refused, match="runs release demo/main/r2 of tiny-llama"):
        release_store.push_spec(client, _spec("demo/main/r3"))
    leader = _leader(host, "healthy")
    assert leader.tick()["action"] == "start"  # type: ignore[index]
    holder = client.get(release_store.LEASE)
    with pytest.raises(Refused, match="the controller moved to step 0 meanwhile"):
        release_store.command(client, "demo/main/r2", "step", lease_ms=10_000, step=1)  # a step it never saw
    assert client.get(release_store.LEASE) == holder  # a refusal takes no lease: the leader is not fenced
    got = release_store.command(client, "demo/main/r2", "step", lease_ms=10_000, step=0)
    assert (got["step"], got["weight"], got["verdict"]) == (1, 50, "running")
    with pytest.raises(Fenced):  # the installer holds the lease now: the leader's write is refused
        leader.store.write({**got, "step": 2}, {"tiny-llama": 100})
    assert json.loads(client.get(release_store.WEIGHTS))["models"] == {"tiny-llama": 50}
    with pytest.raises(Refused, match="not demo/main/r9"):
        release_store.command(client, "demo/main/r9", "stop", lease_ms=10_000)
    stopped = release_store.command(client, "demo/main/r2", "stop", lease_ms=10_000)
    assert (stopped["verdict"], stopped["weight"]) == ("aborted", 0)
    assert json.loads(client.get(release_store.WEIGHTS)) | {"generation": 0, "lease": ""} == {
        "generation": 0, "lease": "", "release": "demo/main/r2", "models": {"tiny-llama": 0}}
    release_store.push_spec(client, _spec("demo/main/r3"))  # the last one ended: a new one may run
    assert release_store.finish(client, "demo/main/r2") is False  # not the one in Redis
    assert release_store.finish(client, "demo/main/r3") is True and client.get(release_store.SPEC) is None


def test_start_refuses_while_the_controller_runs_a_release(site: Path, host: dict[str, Any]) -> None:
    known = known_revision(site)
    revisions.record("demo", known, {"a": True, "b": True}, RunLog("up", "demo"))
    release_store.push_spec(host["client"], _spec("other/main/r7"))  # started from another control machine
    site.write_text(site.read_text().replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}"))
    text = _error(["release", "start", "-i", str(site), "-m", "main"])
    assert "the release controller on a runs release other/main/r7 of model main" in text
    assert [op["op"] for _, op in host["sent"]] == ["show"]  # nothing else was asked, no host touched
    assert state.current("demo") is None


def test_watch_and_status_show_the_controllers_decisions_and_promote_refuses_its_rollback(
    site: Path, host: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, leader = _taken(site, host, "slow")
    leader.tick()  # the canary's e2e p95 is over its limit: rolled back
    result = runner.invoke(app, ["release", "watch", "-i", str(site), "-m", "main", "--poll", "0.5", "--for", "20"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "canary at 20%: start" in result.output
    assert "canary at 20%: rollback (breach): canary e2e_p95 2400 ms over 120 s > e2e_p95 <= 800 ms" in result.output
    assert "verdict: rolled_back" in result.output
    monkeypatch.setattr(scrape, "scrape", lambda inv, at: Scrape(at, {}, {"a": "gateway unreachable"}))
    result = runner.invoke(app, ["release", "status", "-i", str(site)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "release controller: rolled_back, canary at 0%; last decision: canary at 20%: rollback (breach)" in \
        " ".join(result.output.split())
    text = _error(["release", "promote", "-i", str(site), "-m", "main"])
    assert "the release controller rolled back the canary of main: canary e2e_p95 2400 ms" in text
    assert "`installer release abort -i INVENTORY --model main` removes the canary" in text
    assert state.current("demo") == r  # nothing changed on the control machine


def test_promote_steps_through_the_controller_and_fences_it(
    site: Path, host: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, leader = _taken(site, host, "healthy")
    written: list[dict[str, Any]] = []
    monkeypatch.setattr(promote.stages, "write", lambda inv, splits, *a, **k: written.append(dict(splits)))
    result = runner.invoke(app, ["release", "promote", "-i", str(site), "-m", "main"])
    assert result.exit_code == 0, result.output
    assert (_state(host)["step"], _state(host)["weight"]) == (1, 50)
    assert json.loads(host["client"].get(release_store.WEIGHTS))["models"] == {"tiny-llama": 50}
    assert written[-1]["tiny-llama"].canary == 50 and written[-1]["tiny-llama"].controller == r.controller
    assert state.current("demo").step == 1  # type: ignore[union-attr]
    assert leader.tick() is None  # its lease was taken over: it stands by, writing nothing
    assert _state(host)["step"] == 1


def test_abort_stops_the_controller_before_the_stages_file_and_takes_the_release_out(
    site: Path, host: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, leader = _taken(site, host, "healthy")
    events: list[str] = []

    def stages_written(inv: Any, splits: dict[str, Any], *a: Any, **k: Any) -> None:
        events.append(f"stages {sorted(splits)} controller {_state(host)['verdict']}")

    monkeypatch.setattr(abort.stages, "write", stages_written)
    monkeypatch.setattr(abort.drain, "set_drained", lambda inv, names: events.append(f"drained {names}"))
    monkeypatch.setattr(abort.drain, "wait_idle", lambda inv, names, t: 0.0)
    monkeypatch.setattr(abort.rolling, "run_site", lambda *a, **k: events.append("configure stable"))
    monkeypatch.setattr(abort.gate, "play_problems", lambda pb, hosts: {})
    result = runner.invoke(app, ["release", "abort", "-i", str(site), "-m", "main"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert events[0] == "stages [] controller aborted"  # Redis first: the controller cannot step it after
    assert "configure stable" in events
    assert host["client"].get(release_store.SPEC) is None and _state(host)["verdict"] == "aborted"
    assert json.loads(host["client"].get(release_store.WEIGHTS))["models"] == {"tiny-llama": 0}
    assert leader.tick() is None and _state(host)["weight"] == 0
    assert state.current("demo") is None
    assert [op["op"] for _, op in host["sent"]] == ["start", "stop", "finish"]


def test_a_deployment_whose_monitoring_hosts_serve_nothing_has_no_controller_and_start_says_how_to_get_one(
    site: Path, host: dict[str, Any]
) -> None:
    assert controller.host(load_inventory(site)).name == "a"  # the default: the first host, which serves
    site.write_text(site.read_text().replace("{name: a, address: 10.0.0.1}",
                                             "{name: a, address: 10.0.0.1, groups: [monitoring]}"))
    with pytest.raises(ReleaseError, match="has no monitoring host that also serves") as got:
        controller.show(load_inventory(site))
    assert "put a serving host in the `monitoring` group" in got.value.details[0]
    assert host["sent"] == []


def test_the_same_canary_started_again_is_a_new_release_to_the_controller(host: dict[str, Any]) -> None:
    """Starting the same canary again after an abort reuses its revision; the controller's state
    of the earlier start (a rollback) must not be read as the new start's verdict (found by the
    lab's promote test, which starts the canary the frozen-canary test had rolled back)."""
    r = Release("main", "tiny-llama", 1, 2, (20, 50, 100))
    first, again = controller.release_id("demo", r), controller.release_id("demo", r)
    assert first != again and first.startswith("demo/main/r2-") and again.startswith("demo/main/r2-")
    client = host["client"]
    release_store.push_spec(client, _spec(first))
    leader = _leader(host, "slow")
    leader.tick()
    leader.tick()
    assert _state(host)["verdict"] == "rolled_back"
    release_store.finish(client, first)
    release_store.push_spec(client, _spec(again))
    assert leader.tick()["action"] == "start"  # type: ignore[index]
    assert (_state(host)["release"], _state(host)["verdict"]) == (again, "running")


def test_a_tick_whose_lease_lapsed_mid_query_writes_nothing_over_a_promote_made_meanwhile(
    host: dict[str, Any]
) -> None:
    """The tick reads the state, Prometheus stalls past the lease, `installer release promote`
    takes the lease and steps, and its lease lapses too: the tick's renewal must not take a new
    lease and write the state it read before the promote."""
    client = host["client"]
    release_store.push_spec(client, _spec("demo/main/r2"))
    leader = _leader(host, "healthy")
    leader.tick()  # started at 20%
    stepped = []

    def stalled(promql: str) -> dict[str, Any]:
        if not stepped:
            client.delete(release_store.LEASE)  # the leader's lease lapsed while Prometheus answered
            stepped.append(release_store.command(client, "demo/main/r2", "step", lease_ms=10_000, step=0))
            client.delete(release_store.LEASE)  # and the installer's lapsed too
        return {"status": "success", "data": {"resultType": "vector", "result": []}}

    leader.query = stalled
    assert leader.tick() is None  # stood by: the lease was no longer its own
    assert (_state(host)["step"], _state(host)["weight"]) == (1, 50)
    assert json.loads(client.get(release_store.WEIGHTS))["models"] == {"tiny-llama": 50}
    assert leader.store.token is None and client.get(release_store.LEASE) is None
