"""Several gateway workers (service/prefork.py) behave as one gateway: limits, outstanding
counts and metrics are gateway-wide whichever worker a connection reaches; SIGTERM drains
every worker; a worker that dies is replaced. Every request below uses a new connection
(`Connection: close`), so the kernel hands them to the workers independently."""

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.loopback import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CLOSE = {"Connection": "close"}


def _chat(max_tokens: int = 2) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_workers_share_limits_counts_and_metrics(start_upstream: Any, start_gateway: Any, keys: Any,
                                                 scrape_token: Any) -> None:
    upstream = start_upstream()
    slow = start_upstream("--delay-ms", "200", model="slow")
    limited = keys.create("rpm4", rpm=4)
    free = keys.create("free")
    gateway = start_gateway({
        "workers": 2, "keys_file": str(keys.hosts_file), "metrics_token_file": str(scrape_token.file),
        "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"},
                    {"name": "slow", "url": slow.url, "model": "slow"}],
    })
    assert len(_children(gateway.proc.pid)) == 2

    def post(secret: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {secret}", **CLOSE})

    # rpm 4 is the gateway's, not each worker's.
    codes = [post(limited, _chat()).status_code for _ in range(12)]
    assert codes[:4] == [200] * 4 and set(codes[4:]) == {429}, codes
    # Plenty of requests: both workers served some (the kernel spreads new connections).
    for _ in range(40):
        assert post(free, _chat()).status_code == 200
    served_by = {r["pid"] for r in gateway.log_records()}
    assert served_by == set(_children(gateway.proc.pid)), served_by

    # Whichever worker answers a scrape, the counters are the sum of all workers'.
    for _ in range(6):
        text = httpx.get(gateway.url + "/metrics", headers={**CLOSE, **scrape_token.headers}).text
        assert 'pli_gateway_requests_total{key="free",model="tiny",status="200"} 40.0' in text
        # refused on its headers, before the body named a model
        assert 'pli_gateway_requests_total{key="rpm4",model="-",status="429"} 8.0' in text

    # A stream in flight on one worker is outstanding in every worker's /readyz (what a
    # rolling upgrade's drain waits on).
    body = {**_chat(16), "model": "slow", "stream": True}
    thread = threading.Thread(target=post, args=(free, body))
    thread.start()
    details = {**CLOSE, **scrape_token.headers}  # /readyz shows them to the scrape token only
    until(lambda: httpx.get(gateway.url + "/readyz", headers=details).json()["outstanding"]["slow"] == 1, timeout=10)
    seen = [httpx.get(gateway.url + "/readyz", headers=details).json()["outstanding"]["slow"] for _ in range(10)]
    thread.join(30)
    assert seen == [1] * 10, seen
    assert httpx.get(gateway.url + "/readyz", headers=details).json()["outstanding"] == {"e1": 0, "slow": 0}


def test_sigterm_drains_every_worker_and_a_dead_worker_is_replaced(
    start_upstream: Any, start_gateway: Any
) -> None:
    slow = start_upstream("--delay-ms", "150")
    gateway = start_gateway({
        "workers": 2, "allow_anonymous": True, "drain_timeout_s": 20,
        "engines": [{"name": "e", "url": slow.url, "model": "tiny"}],
    })
    first = _children(gateway.proc.pid)
    os.kill(first[0], signal.SIGKILL)
    until(lambda: len(_children(gateway.proc.pid)) == 2 and first[0] not in _children(gateway.proc.pid), timeout=10)
    until(lambda: httpx.get(gateway.url + "/readyz", headers=CLOSE).status_code == 200, timeout=10)

    results: list[int] = []

    def stream() -> None:
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json={**_chat(12), "stream": True},
                          headers=CLOSE, timeout=30) as resp:
            chunks = [line for line in resp.iter_lines() if line.startswith("data: ")]
            results.append(resp.status_code if chunks[-1] == "data: [DONE]" else -1)

    threads = [threading.Thread(target=stream) for _ in range(6)]  # ~1.8 s each
    for t in threads:
        t.start()
    time.sleep(0.6)
    workers = _children(gateway.proc.pid)
    gateway.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    assert results == [200] * 6  # every stream ran to [DONE]
    assert gateway.proc.wait(20) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def test_workers_go_when_the_supervisor_is_killed(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream()
    gateway = start_gateway({
        "workers": 2, "allow_anonymous": True, "engines": [{"name": "e", "url": upstream.url, "model": "tiny"}],
    })
    workers = _children(gateway.proc.pid)
    assert len(workers) == 2
    gateway.proc.kill()  # SIGKILL: no chance to stop them itself
    gateway.proc.wait(10)
    until(lambda: not any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in workers), timeout=10)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
