"""The gateway's engine checks: an idle engine in rotation costs a real token only every
health_deep_interval_s and /health in between; an engine is admitted only by a real request,
so one that answers /health but cannot generate never takes traffic; a dead one leaves
rotation within an interval either way."""

import signal
import time
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _config(*upstreams: Any, deep_s: float) -> dict[str, Any]:
    engines = [{"name": f"e{i}", "url": u.url, "model": "tiny"} for i, u in enumerate(upstreams)]
    return {"allow_anonymous": True, "health_interval_s": 0.5, "health_deep_interval_s": deep_s,
            "engines": engines}


def _ready(gateway: Any) -> dict[str, bool]:
    return httpx.get(gateway.url + "/readyz").json()["engines"]


def test_an_idle_engine_gets_health_between_real_requests(start_upstream: Any, start_gateway: Any) -> None:
    sparse, every = start_upstream(), start_upstream()
    start_gateway(_config(sparse, deep_s=3.0))
    start_gateway(_config(every, deep_s=0.5))  # the deep interval at most the interval: all real
    before = sparse.stats(), every.stats()
    # A check is due once the last passed one is an interval old, and the loop wakes every
    # interval: about one check a second each.
    time.sleep(6.2)
    after = sparse.stats(), every.stats()
    real = [a["requests"] - b["requests"] for a, b in zip(after, before, strict=True)]
    health = [a["health_checks"] - b["health_checks"] for a, b in zip(after, before, strict=True)]
    assert 1 <= real[0] <= 3 and health[0] >= 3, (real, health)
    assert real[1] >= 5 and health[1] == 0, (real, health)


def test_health_alone_never_admits_an_engine(start_upstream: Any, start_gateway: Any) -> None:
    broken = start_upstream("--status", "500")  # /health 200, every generation a 500
    good = start_upstream()
    gateway = start_gateway(_config(broken, good, deep_s=30.0))
    time.sleep(2)  # four intervals
    assert _ready(gateway) == {"e0": False, "e1": True}
    assert broken.stats()["health_checks"] == 0  # not admitted: only real requests were tried


def test_an_idle_engine_that_dies_leaves_rotation_within_an_interval(
    start_upstream: Any, start_gateway: Any
) -> None:
    doomed, good = start_upstream(), start_upstream()
    gateway = start_gateway(_config(doomed, good, deep_s=30.0))
    deadline = time.monotonic() + 5
    while not all(_ready(gateway).values()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    killed = time.monotonic()
    while _ready(gateway)["e0"]:
        assert time.monotonic() - killed < 3, "a dead engine stayed in rotation"
        time.sleep(0.05)
    assert _ready(gateway)["e1"]
