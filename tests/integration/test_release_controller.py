"""The release controller (service/release_controller.py) with real parts on loopback: a
password-protected redis-server, `python -m service` gateways reading the weights from it, the
monitoring role's own Prometheus configuration scraping them, and two controllers as separate
processes (two monitoring hosts). Nothing on the control machine acts: the release is the spec
in Redis (#35).

  - the lease's scripts: one holder, renewals, takeover after the deadline, fenced writes;
  - a healthy canary walks its steps to 100% while the leading controller is SIGKILLed mid-step:
    the other takes the lease and goes on from the recorded step, no step twice;
  - a slow canary (absolute e2e p95) is set to 0% at once, with no failed client request;
  - Prometheus unreachable: the weights stay, the hold is blind, the metric says so.
"""

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from service import release_store
from service.release_store import Fenced, Store
from tests.support.loopback import free_port, stop, until
from tests.support.monitoring_render import inventory_vars, render
from tests.support.redis_server import redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

STEPS = [10, 50, 100]


@pytest.fixture
def secured_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server that requires a password, as the redis role configures it."""
    password = secrets.token_hex(16)
    data = tmp_path / "redis"
    data.mkdir()
    with redis_server(data, ["--save", "", "--appendonly", "no", "--requirepass", password]) as url:
        yield url.replace("redis://", f"redis://:{password}@")


def _spec(release: str, window_s: int = 4, dwell_s: float = 4, min_requests: int = 5, relative: bool = True,
          absolute: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": release, "served_name": "tiny", "steps": STEPS, "dwell_s": dwell_s,
            "slo": {"window_s": window_s, "min_requests": min_requests, "relative": relative,
                    "error_ratio_margin": 0.02, "ttft_p99_ratio": 1.5, "e2e_p95_ratio": 3,
                    "latency_floor_s": 0.8, "absolute": list(absolute)}}


def _controller(tmp_path: Path, name: str, redis_url: str, prometheus_url: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    settings = tmp_path / f"{name}.json"
    settings.write_text(json.dumps({
        "redis_url": redis_url, "prometheus_url": prometheus_url, "audit_log": str(tmp_path / f"{name}.jsonl"),
        "metrics_port": port, "lease_ms": 2000, "interval_s": 0.5,
    }))
    settings.chmod(0o600)
    log = (tmp_path / f"{name}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "service.release_controller", "--settings", str(settings)],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, port


def _audit(tmp_path: Path, *names: str) -> list[dict[str, Any]]:
    records = []
    for name in names:
        path = tmp_path / f"{name}.jsonl"
        if path.exists():
            records += [json.loads(line) for line in path.read_text().splitlines()]
    return sorted(records, key=lambda r: r["at"])


def _state(client: "redis.Redis") -> dict[str, Any]:
    return json.loads(client.get(release_store.STATE) or "{}")


def _prometheus(tmp_path: Path, gateway_url: str, token_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus with the monitoring role's configuration, scraping the gateway every second."""
    exe = "/usr/bin/prometheus"
    if not Path(exe).exists():
        pytest.fail("prometheus is missing: `sudo bash .ci/setup` installs Debian's prometheus packages")
    port = free_port()
    variables = inventory_vars({"gw": "127.0.0.1"}, ["gw"], _monitoring_token_file=str(token_file),
                               monitoring_scrape_interval="1s", monitoring_prometheus_port=port)
    variables["gateway_port"] = int(gateway_url.rsplit(":", 1)[1])
    (tmp_path / "prometheus.yml").write_text(render("prometheus.yml.j2", **variables))
    proc = subprocess.Popen(
        [exe, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    until(lambda: _up(url), timeout=30)
    return proc, url


def _up(url: str) -> bool:
    try:
        r = httpx.get(url + "/api/v1/query", params={"query": 'up{job="gateway"}'}, timeout=2)
        return any(s["value"][1] == "1" for s in r.json()["data"]["result"])
    except (httpx.HTTPError, ValueError, KeyError):
        return False


class Traffic:
    """Callers, each request a new session (so the canary's share is its weight), until stopped;
    every answer's status and stage kept."""

    def __init__(self, url: str, threads: int = 3) -> None:
        self.url, self.results, self.stopping = url, [], False
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    results: list[tuple[float, int, str]]

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stopping:
                body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
                try:
                    r = client.post(self.url + "/v1/chat/completions", json=body,
                                    headers={"X-Session": uuid.uuid4().hex})
                    self.results.append((time.monotonic(), r.status_code, r.headers.get("x-release-stage", "")))
                except httpx.HTTPError as exc:
                    self.results.append((time.monotonic(), 0, type(exc).__name__))

    def stop(self) -> None:
        self.stopping = True
        for t in self.threads:
            t.join(timeout=30)


def _deployment(tmp_path: Path, start_upstream: Any, start_gateway: Any, scrape_token: Any, redis_url: str,
                release: str, canary_args: tuple[str, ...] = ()) -> tuple[Any, subprocess.Popen[bytes], str]:
    stable, canary = start_upstream(), start_upstream(*canary_args)
    stages = tmp_path / "stages.json"
    # As `installer release start` leaves it: the first step's weight, the controller in charge.
    stages.write_text(json.dumps({"models": {"tiny": {"weights": {"stable": 90, "canary": 10},
                                                      "sticky": "session", "controller": release}}}))
    gateway = start_gateway({
        "allow_anonymous": True, "workers": 2, "metrics_token_file": str(scrape_token.file),
        "session_header": "X-Session", "stages_file": str(stages), "limits": {"redis_url": redis_url},
        "engines": [{"name": "s1", "url": stable.url, "model": "tiny"},
                    {"name": "s1-canary", "url": canary.url, "model": "tiny", "stage": "canary"}],
    })
    prom, prom_url = _prometheus(tmp_path, gateway.url, scrape_token.file)
    return gateway, prom, prom_url


def test_the_lease_has_one_holder_renews_passes_on_at_its_deadline_and_fences_writes(secured_redis: str) -> None:
    client = redis.Redis.from_url(secured_redis)
    a, b = Store(client, "mon-a/1/x", lease_ms=400), Store(client, "mon-b/2/y", lease_ms=400)
    assert a.lease() and not b.lease()
    assert a.token == "mon-a/1/x#1"
    assert a.write({"release": "demo/r1", "step": 0}, {"tiny": 10}) == 1
    for _ in range(4):  # renewed past its first deadline: still a's
        time.sleep(0.2)
        assert a.lease() and not b.lease()
    time.sleep(0.6)  # a stopped renewing (killed, or cut off): b takes over after the deadline
    assert b.lease() and b.token == "mon-b/2/y#2"
    with pytest.raises(Fenced):
        a.write({"step": 9}, {"tiny": 100})
    assert not a.lease()  # a's old token no longer renews anything
    assert json.loads(client.get(release_store.WEIGHTS) or "{}")["models"] == {"tiny": 10}
    assert b.write({"release": "demo/r1", "step": 1}, {"tiny": 50}) == 2
    assert json.loads(client.get(release_store.WEIGHTS) or "{}") == {
        "generation": 2, "lease": "mon-b/2/y#2", "release": "demo/r1", "models": {"tiny": 50}}
    b.give_up()
    assert a.lease() and a.token == "mon-a/1/x#3"


def test_a_healthy_canary_is_promoted_along_its_steps_though_the_leading_controller_is_killed(
    tmp_path: Path, start_upstream: Any, start_gateway: Any, scrape_token: Any, secured_redis: str
) -> None:
    release = f"demo/{uuid.uuid4().hex[:6]}"
    gateway, prom, prom_url = _deployment(tmp_path, start_upstream, start_gateway, scrape_token, secured_redis,
                                          release)
    client = redis.Redis.from_url(secured_redis)
    controllers = {name: _controller(tmp_path, name, secured_redis, prom_url)[0] for name in ("mon-a", "mon-b")}
    traffic = Traffic(gateway.url)
    try:
        release_store.push_spec(client, _spec(release))
        until(lambda: _state(client).get("weight") == 50, timeout=60)
        # the leader, by the PID in its lease token, killed mid-step
        lease: Any = client.get(release_store.LEASE)
        leader_pid = int(lease.decode().split("/")[1])
        leader = next(n for n, p in controllers.items() if p.pid == leader_pid)
        controllers[leader].send_signal(signal.SIGKILL)
        controllers[leader].wait()
        killed_at = time.time()
        until(lambda: _state(client).get("verdict") == "promoted", timeout=90)
        survivor = next(n for n in controllers if n != leader)
        time.sleep(1)
    finally:
        traffic.stop()
        for p in controllers.values():
            stop(p)
        stop(prom)
    records = _audit(tmp_path, "mon-a", "mon-b")
    moves = [(r["action"], r["weight"]) for r in records if r["action"] != "hold"]
    assert moves == [("start", 10), ("advance", 10), ("advance", 50), ("promote", 100)], moves
    assert {r["holder"].split("#")[0].split("/")[1] for r in records if r["at"] > killed_at + 0.5} == \
        {str(controllers[survivor].pid)}
    # the advance was judged on figures over the window, from Prometheus
    advance = next(r for r in records if r["action"] == "advance")
    assert advance["figures"]["4s"]["canary"]["requests"] >= 5, advance
    # no caller failed, and the callers followed the weights to the canary
    assert traffic.results and all(status == 200 for _, status, _ in traffic.results), \
        [r for r in traffic.results if r[1] != 200][:5]
    last = [stage for _, _, stage in traffic.results[-20:]]
    assert set(last) == {"canary"}, last
    weights = json.loads(client.get(release_store.WEIGHTS) or "{}")
    assert weights["models"] == {"tiny": 100}
    assert os.stat(tmp_path / f"{survivor}.jsonl").st_mode & 0o777 == 0o640


def test_a_slow_canary_is_rolled_back_at_once_with_no_failed_request(
    tmp_path: Path, start_upstream: Any, start_gateway: Any, scrape_token: Any, secured_redis: str
) -> None:
    # every canary answer takes 3 tokens x 60 ms, stable's none
    release = f"demo/{uuid.uuid4().hex[:6]}"
    gateway, prom, prom_url = _deployment(tmp_path, start_upstream, start_gateway, scrape_token, secured_redis,
                                          release, ("--delay-ms", "60"))
    client = redis.Redis.from_url(secured_redis)
    proc, port = _controller(tmp_path, "mon-a", secured_redis, prom_url)
    traffic = Traffic(gateway.url, threads=4)
    try:
        release_store.push_spec(client, _spec(release, relative=False, absolute=("e2e_p95 <= 100 ms over 4 s",),
                                              min_requests=3, dwell_s=600))
        until(lambda: _state(client).get("verdict") == "rolled_back", timeout=60)
        rolled_back = time.monotonic()
        time.sleep(3)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        traffic.stop()
        stop(proc)
        stop(prom)
    state = _state(client)
    assert state["weight"] == 0 and state["last"]["kind"] == "breach", state
    assert any("canary e2e_p95" in why and "> e2e_p95 <= 100 ms over 4 s" in why for why in state["last"]["reasons"])
    assert json.loads(client.get(release_store.WEIGHTS) or "{}")["models"] == {"tiny": 0}
    assert all(status == 200 for _, status, _ in traffic.results)
    # within a poll of the weights (1 s) every caller is stable's
    late = [stage for at, _, stage in traffic.results if at > rolled_back + 1.5]
    assert late and set(late) == {"stable"}
    assert 'pli_release_controller_verdict{model="tiny",verdict="rolled_back"} 1.0' in metrics
    assert 'pli_release_controller_decisions_total{action="rollback",kind="breach",model="tiny"} 1.0' in metrics


def test_prometheus_unreachable_holds_the_weights_blind(tmp_path: Path, secured_redis: str) -> None:
    client = redis.Redis.from_url(secured_redis)
    proc, port = _controller(tmp_path, "mon-a", secured_redis, f"http://127.0.0.1:{free_port()}")
    try:
        release_store.push_spec(client, _spec("demo/blind", dwell_s=0.1))
        until(lambda: _state(client).get("last", {}).get("kind") == "blind", timeout=30)
        time.sleep(2)  # many ticks: still holding
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        stop(proc)
    state = _state(client)
    assert (state["step"], state["weight"], state["verdict"]) == (0, 10, "running")
    assert json.loads(client.get(release_store.WEIGHTS) or "{}")["models"] == {"tiny": 10}
    assert "pli_release_controller_blind 1.0" in metrics and "pli_release_controller_leader 1.0" in metrics
    assert "Prometheus at http://127.0.0.1:" in state["last"]["reasons"][0]
    # the password never reaches the log
    password = secured_redis.split(":")[2].split("@")[0]
    assert password not in (tmp_path / "mon-a.log").read_text()
