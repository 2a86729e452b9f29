"""Redis that survives a host (#37): two real gateways follow the primary through three real
sentinels, all TLS with the deployment CA and a password. Under load through both gateways the
primary is SIGKILLed: the sentinels promote the replica, the gateways (on_unavailable: closed)
refuse limited keys with 503 while there is no primary and then follow the new one; the key's
rate limit holds with no over-admission beyond one window, and the usage ledger on the new
primary holds every request the gateways did not report failing to record (WAIT 1 after each
usage write). The failover time is printed (docs/ha.md#redis-that-survives-a-host-redisreplicas quotes it)."""

import datetime as dt
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis.sentinel import MasterNotFoundError, Sentinel

from installer.tls import ca
from service.redis_connect import Endpoint, TLSFiles, parse_sentinel, sync_client
from service.usage import USAGE_PREFIX
from tests.support import REPO
from tests.support.loopback import free_port, stop
from tests.support.redis_sentinel import replicated_redis, sentinels_ready

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RPM = 60  # the key's limit, shared by both gateways through Redis
# The redis role's sentinel timings (playbooks/roles/redis/defaults/main.yml).
DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS = 2000, 10000
_CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        stop(proc, signal.SIGKILL)


def _metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


def test_gateways_follow_a_failover_and_keep_limits_and_acknowledged_usage(
    start_upstream: Any, keys: Any, scrape_token: Any, tmp_path: Path, procs: list[subprocess.Popen[bytes]],
) -> None:
    authority = ca.create_ca("it")
    issued = ca.issue_server(authority, "h", ["localhost"], ["127.0.0.1"], 30)
    ca_file, cert, key = tmp_path / "ca.pem", tmp_path / "host.pem", tmp_path / "host.key"
    ca_file.write_bytes(authority.cert_pem)
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    key.chmod(0o600)
    password = os.urandom(16).hex()
    verify = ssl.create_default_context(cafile=str(ca_file))
    secret = keys.create("k", rpm=RPM, quota_tokens=100_000_000, quota_period="day")
    upstream = start_upstream()
    data = tmp_path / "redis"
    data.mkdir()
    with replicated_redis(data, ca_file, cert, key, password, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS) as rr:
        url = f"rediss://:{password}@127.0.0.1:{rr.primary.port}/0"
        gateways = []
        for n in range(2):
            port = free_port()
            conf = tmp_path / f"gateway-{n}.yaml"
            conf.write_text(yaml.safe_dump({
                "port": port, "health_interval_s": 0.5,
                "keys_file": str(keys.hosts_file), "metrics_token_file": str(scrape_token.file),
                "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
                "tls": {"certfile": str(cert), "keyfile": str(key), "ca_file": str(ca_file)},
                "limits": {"redis_url": url, "redis_sentinels": rr.sentinel_addresses,
                           "redis_on_unavailable": "closed"},
            }))
            conf.chmod(0o600)
            env = {**os.environ, "PLI_GATEWAY_CONFIG": str(conf)}
            with (tmp_path / f"gateway-{n}.out").open("wb") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, stdout=out,
                                              stderr=subprocess.STDOUT, env=env))
            gateways.append(f"https://127.0.0.1:{port}")
        for gw in gateways:
            deadline = time.monotonic() + 90  # two gateways starting on a loaded two-core CI machine
            while True:
                try:
                    if httpx.get(gw + "/readyz", verify=verify, timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "gateway-0.out").read_text()[-3000:]
                time.sleep(0.1)

        tls = TLSFiles(str(ca_file), str(cert), str(key))
        sentinels = tuple(parse_sentinel(s) for s in rr.sentinel_addresses)
        ask = Sentinel(list(sentinels), sentinel_kwargs={
            "password": password, "ssl": True, "ssl_ca_certs": str(ca_file), "ssl_certfile": str(cert),
            "ssl_keyfile": str(key), "socket_timeout": 1})
        deadline = time.monotonic() + 40
        while not sentinels_ready(ask.sentinels, rr.replica.port):
            assert time.monotonic() < deadline, "the sentinels did not find each other and the replica"
            time.sleep(0.2)
        results: list[tuple[float, float, int]] = []  # (sent, answered, status)
        done = threading.Event()

        def load(gw: str) -> None:
            with httpx.Client(verify=verify, timeout=30) as client:
                while not done.is_set():
                    sent = time.monotonic()
                    r = client.post(gw + "/v1/chat/completions", json=_CHAT,
                                    headers={"Authorization": f"Bearer {secret}"})
                    results.append((sent, time.monotonic(), r.status_code))
                    if r.status_code == 429:
                        time.sleep(0.02)

        threads = [threading.Thread(target=load, args=(gw,)) for gw in gateways for _ in range(3)]
        start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(5)
        killed = time.monotonic()
        os.kill(rr.primary.proc.pid, signal.SIGKILL)  # the primary's host is gone, mid-write
        promoted = None
        while time.monotonic() - killed < 30:
            try:
                if ask.discover_master("pli")[1] == rr.replica.port:
                    promoted = time.monotonic()
                    break
            except MasterNotFoundError:  # the old primary is down and none is promoted yet
                pass
            time.sleep(0.05)
        assert promoted is not None, "the sentinels did not promote the replica within 30 s"
        while time.monotonic() - promoted < 30 and not any(t > promoted and s == 200 for _, t, s in results):
            time.sleep(0.05)
        time.sleep(5)
        done.set()
        for t in threads:
            t.join()
        end = time.monotonic()
        time.sleep(1)  # the last usage writes happen after their answers

        served = [t for _, t, s in results if s == 200]
        # the first request sent after the kill that was served: the new primary reached
        first_after = min(t for sent, t, s in results if s == 200 and sent > killed)
        last_refused = max((t for _, t, s in results if s == 503), default=killed)
        refused = sum(1 for _, _, s in results if s == 503)
        other = {s for _, _, s in results} - {200, 429, 503}
        assert not other, f"unexpected statuses {other}"
        window = end - start
        # a full bucket at the start, its refill over the run, and at most one window more
        # (a bucket write the replica had not yet received when the primary died)
        allowed = RPM + RPM * window / 60 + RPM
        assert len(served) <= allowed, (len(served), allowed)
        assert sum(1 for _, _, s in results if s == 429) > 0, "the load did not reach the limit: it proves nothing"

        client = sync_client(Endpoint(url, sentinels, "pli", tls), 5, decode_responses=True)
        assert client.connection_pool.get_master_address()[1] == rr.replica.port
        ledger = client.hgetall(USAGE_PREFIX + dt.datetime.now(dt.UTC).date().isoformat())
        recorded = sum(int(v) for f, v in ledger.items() if f.startswith("r:k:"))
        # Every usage write a gateway did not report failing (limiter_errors counts each failed
        # write, and each failed check that redis_unavailable counts too) is on the new primary.
        failed = 0.0
        for gw in gateways:
            text = httpx.get(gw + "/metrics", verify=verify, headers=scrape_token.headers).text
            failed += _metric(text, "pli_gateway_limiter_errors_total") - _metric(
                text, "pli_gateway_redis_unavailable_total")
        back = min(t for _, t, s in results if s in (200, 429) and t > last_refused)  # Redis answering again
        print(f"\nfailover: SIGKILL -> replica promoted (seen by the test's poll) {promoted - killed:.2f} s; "
              f"503 (no primary) until {last_refused - killed:.2f} s, limits answered again at "
              f"{back - killed:.2f} s, first request sent after the kill served at {first_after - killed:.2f} s; "
              f"{len(served)} served of {len(results)} "
              f"({refused} refused 503 while no primary), limit allows {allowed:.0f} in {window:.1f} s; "
              f"usage: {recorded} recorded, {failed:.0f} writes reported failed")
        assert len(served) - failed <= recorded <= len(served), (len(served), failed, recorded)
        assert refused > 0, "closed: limited keys are refused while there is no primary"
