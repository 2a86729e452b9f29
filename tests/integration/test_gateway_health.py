"""The gateway's engine checks: an idle engine in rotation costs a real token only every
health_deep_interval_s and /health in between; an engine is admitted only by a real request,
so one that answers /health but cannot generate never takes traffic; a client's failed request
makes the next check a real one, so an admitted engine that stops generating leaves rotation
within an interval, not a deep interval; a dead one leaves within an interval either way."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.loopback import seconds_until as _until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _config(*upstreams: Any, deep_s: float, interval_s: float = 0.5) -> dict[str, Any]:
    engines = [{"name": f"e{i}", "url": u.url, "model": "tiny"} for i, u in enumerate(upstreams)]
    return {"allow_anonymous": True, "health_interval_s": interval_s, "health_deep_interval_s": deep_s,
            "engines": engines}


def _ready(gateway: Any) -> dict[str, bool]:
    return httpx.get(gateway.url + "/readyz").json()["engines"]


def test_an_idle_engine_gets_health_between_real_requests(start_upstream: Any, start_gateway: Any) -> None:
    sparse, every = start_upstream(), start_upstream()
    start_gateway(_config(sparse, deep_s=3.0))
    start_gateway(_config(every, deep_s=0.5))  # the deep interval at most the interval: all real
    before = sparse.stats(), every.stats()
    time.sleep(6.2)  # a check at each 0.5 s wake-up: about 12 each
    after = sparse.stats(), every.stats()
    real = [a["requests"] - b["requests"] for a, b in zip(after, before, strict=True)]
    health = [a["health_checks"] - b["health_checks"] for a, b in zip(after, before, strict=True)]
    assert 1 <= real[0] <= 3 and health[0] >= 3, (real, health)
    assert real[1] >= 5 and health[1] == 0, (real, health)


def test_health_alone_never_admits_an_engine(start_upstream: Any, start_gateway: Any) -> None:
    broken = start_upstream("--status", "500")  # /health 200, every generation a 500
    good = start_upstream()
    gateway = start_gateway(_config(broken, good, deep_s=30.0, interval_s=1.0))
    _until(lambda: _ready(gateway)["e1"], 10, "the good engine was never admitted")
    time.sleep(2)  # two more intervals
    assert _ready(gateway)["e0"] is False
    assert broken.stats()["health_checks"] == 0  # not admitted: only real requests were tried


def test_a_client_failure_makes_the_next_check_real(start_upstream: Any, start_gateway: Any) -> None:
    """e0 is admitted, then fails every generation while /health still answers: with a real token
    due only every 30 s, a client's request that fails on it (retried on e1) takes it out."""
    flaky, good = start_upstream(), start_upstream()
    # a ready window (3 intervals, 6 s) longer than the 4 s allowed below: only a check that
    # failed, not a check that was never made, can take e0 out
    gateway = start_gateway(_config(flaky, good, deep_s=30.0, interval_s=2.0))
    _until(lambda: all(_ready(gateway).values()), 15, "both engines admitted")
    httpx.post(flaky.url + "/_status", json={"status": 500})
    time.sleep(3)  # /health checks pass meanwhile: e0 stays in rotation
    assert _ready(gateway)["e0"] is True
    for _ in range(4):  # least outstanding: some go to e0 first; each is retried on e1
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(gateway.url + "/v1/chat/completions", json=chat).status_code == 200
    assert flaky.stats()["requests"] >= 1
    _until(lambda: not _ready(gateway)["e0"], 4, "e0 stayed in rotation after its failures")
    assert _ready(gateway)["e1"]


def test_an_idle_engine_that_dies_leaves_rotation_within_an_interval(
    start_upstream: Any, start_gateway: Any
) -> None:
    doomed, good = start_upstream(), start_upstream()
    # ready window 6 s: leaving within 5 s is a failed /health check, not an expired window
    gateway = start_gateway(_config(doomed, good, deep_s=30.0, interval_s=2.0))
    _until(lambda: all(_ready(gateway).values()), 15, "both engines admitted")
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    _until(lambda: not _ready(gateway)["e0"], 5, "a dead engine stayed in rotation")
    assert _ready(gateway)["e1"]


def _chat(stream: bool) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": stream}


def test_a_wedged_engine_is_taken_out_and_its_requests_go_elsewhere(start_upstream: Any, start_gateway: Any) -> None:
    """An engine that answers /health (and here even the completion probe) but never answers a
    chat stayed in rotation for 41.8 s, its 16 requests still waiting at 55 s. Now one whose
    streams wait past engine_stall_s with no progress is taken out of rotation, and the waiting
    streams are retried on another engine at once, before their own deadline. (A whole answer
    is slow by nature: it has answer_timeout_s, the next test.)"""
    wedged = start_upstream("--chat-fake", '{"stall_s": 600}')
    good = start_upstream()
    gateway = start_gateway({**_config(wedged, good, deep_s=60), "engine_stall_s": 1.5,
                             "first_byte_timeout_s": 60, "answer_timeout_s": 60})
    _until(lambda: all(_ready(gateway).values()), 10, "both engines admitted")

    def ask(n: int) -> tuple[int, float]:
        start = time.monotonic()
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(True), timeout=60)
        return resp.status_code, time.monotonic() - start

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(16)))
    assert {status for status, _ in answers} == {200}, answers
    # the stall (1.5 s), a health interval to notice it, and the retry; not the 60 s deadline
    assert max(seconds for _, seconds in answers) < 10, answers
    assert httpx.get(gateway.url + "/readyz").json()["status"] == "ready"


def test_every_attempt_has_a_first_byte_deadline(start_upstream: Any, start_gateway: Any) -> None:
    """Only canaries had one: a stable engine silent before its first byte held its requests
    for the upstream timeout (600 s). Now the attempt is given up and retried elsewhere."""
    silent = start_upstream("--chat-fake", '{"stall_s": 600}')
    good = start_upstream()
    gateway = start_gateway({**_config(silent, good, deep_s=60), "engine_stall_s": 600,
                             "first_byte_timeout_s": 1, "answer_timeout_s": 1})
    _until(lambda: all(_ready(gateway).values()), 10, "both engines admitted")
    for n in range(4):
        start = time.monotonic()
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(n % 2 == 1), timeout=30)
        assert resp.status_code == 200 and time.monotonic() - start < 6, resp.text


def test_readyz_shows_details_only_to_the_scrape_token(
    start_upstream: Any, start_gateway: Any, scrape_token: Any
) -> None:
    """Public /readyz listed engine names, outstanding counts and key file digests."""
    upstream = start_upstream()
    gateway = start_gateway({**_config(upstream, deep_s=60), "metrics_token_file": str(scrape_token.file)})
    public = httpx.get(gateway.url + "/readyz")
    assert public.status_code == 200 and public.json() == {"status": "ready"}
    wrong = httpx.get(gateway.url + "/readyz", headers={"Authorization": "Bearer nope"})
    assert wrong.json() == {"status": "ready"}
    full = httpx.get(gateway.url + "/readyz", headers=scrape_token.headers).json()
    assert full["engines"] == {"e0": True} and full["outstanding"] == {"e0": 0} and "keys_sha256" in full
