"""A model spanning hosts whose Ray group lost a member, as the gateway sees its engine (#36 item 2).

vLLM 0.26's Ray executor (RayExecutorV2, vllm/v1/executor/ray_executor_v2.py) watches its
workers with ray.wait every 5 s; a dead one fails the executor, the engine core stops
("Executor failed."), and the API server's /health answers 503 (EngineDeadError) before it
exits. While Ray has not yet noticed a member gone (a host cut off, not crashed), the driver can
hang instead, /health included. The fake engine's /health is set to each (benchmarks/
fake_upstream.py POST /_health); the real gateway must take that engine out of rotation within
seconds, keep the other engines in rotation meanwhile (a hung check must not hold the others'),
serve every request from a replica while one is left, and, with none left, fail a request at
once with a clear 503, not hang."""

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.loopback import seconds_until as _until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
INTERVAL_S = 1.0  # the gateway's ready window is 3 intervals (service/app.py)


def _ready(gateway: Any) -> dict[str, bool]:
    return httpx.get(gateway.url + "/readyz", timeout=5).json()["engines"]


def _ask(gateway: Any) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
                      timeout=30)


def test_a_group_whose_health_fails_or_hangs_leaves_rotation(start_upstream: Any, start_gateway: Any) -> None:
    dead, hung, good = start_upstream(), start_upstream(), start_upstream()
    gateway = start_gateway({
        "allow_anonymous": True, "health_interval_s": INTERVAL_S, "health_deep_interval_s": 30.0,
        "engines": [{"name": n, "url": u.url, "model": "tiny"} for n, u in
                    (("dead", dead), ("hung", hung), ("good", good))],
    })
    _until(lambda: all(_ready(gateway).values()), 20, "all three engines admitted")

    # the engine core died: /health and generation answer 503, as vLLM's do
    httpx.post(dead.url + "/_health", json={"status": 503})
    httpx.post(dead.url + "/_status", json={"status": 503})
    # the driver hangs on its lost worker: /health never answers
    httpx.post(hung.url + "/_health", json={"hang": True})
    t0 = time.monotonic()
    seen_good: list[bool] = []

    def out() -> bool:
        ready = _ready(gateway)
        seen_good.append(ready["good"])
        return not ready["dead"] and not ready["hung"]

    took = _until(out, 15, "an engine whose /health failed or hung stayed in rotation")
    # 503: the next check (an interval); hung: the 5 s /health timeout or the ready window (3 s)
    assert took < 7, took
    # while the hung engine's checks wait out their timeout, the good one is checked on time
    # and never leaves rotation with no client traffic to keep it there
    while time.monotonic() - t0 < 8:  # past a hung /health's 5 s timeout
        seen_good.append(_ready(gateway)["good"])
        time.sleep(0.2)
    assert all(seen_good), f"the good engine left rotation {seen_good.count(False)} time(s)"

    # every request is served by the replica left
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: _ask(gateway), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers if a.status_code != 200]

    # the last replica gone too: a clear error at once, not a hang
    httpx.post(good.url + "/_health", json={"status": 503})
    httpx.post(good.url + "/_status", json={"status": 503})
    _until(lambda: not any(_ready(gateway).values()), 10, "the last engine stayed in rotation")
    start = time.monotonic()
    resp = _ask(gateway)
    assert time.monotonic() - start < 2
    assert resp.status_code == 503 and resp.headers.get("retry-after") == "1", resp.text
    assert resp.json()["error"]["code"] == "no_healthy_engine" and "'tiny'" in resp.json()["error"]["message"]
    assert httpx.get(gateway.url + "/readyz").json()["status"] == "no ready engine"

    # the group back (`installer up`, or systemd's restart): admitted again by a real request
    httpx.post(dead.url + "/_health", json={"status": 200})
    httpx.post(dead.url + "/_status", json={"status": 0})
    _until(lambda: _ready(gateway)["dead"], 10, "the repaired engine was not admitted again")
    assert _ask(gateway).status_code == 200
