"""Rolling-upgrade mechanics of the real gateway process: the drain file takes engines out of
rotation (and /readyz shows what is still outstanding on them), and under socket activation a
restart queues new connections for the next process instead of refusing them."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import REPO
from tests.support.loopback import free_port, stop, until, wait_http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _chat(max_tokens: int = 2) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}


def test_drained_engines_get_no_new_requests(start_upstream: Any, start_gateway: Any, tmp_path: Path) -> None:
    a, b = start_upstream("--delay-ms", "100"), start_upstream()
    drain = tmp_path / "drain.json"
    gateway = start_gateway({
        "allow_anonymous": True, "drain_file": str(drain),
        "engines": [{"name": "a", "url": a.url, "model": "tiny"}, {"name": "b", "url": b.url, "model": "tiny"}],
    })
    # A slow stream on engine a, pinned there before the drain.
    drain.write_text(json.dumps({"engines": ["b"]}))
    until(lambda: httpx.get(gateway.url + "/readyz").json()["engines"] == {"a": True, "b": False})
    done: list[int] = []

    def slow() -> None:
        done.append(httpx.post(gateway.url + "/v1/chat/completions", json=_chat(16), timeout=30).status_code)

    thread = threading.Thread(target=slow)
    thread.start()
    until(lambda: httpx.get(gateway.url + "/readyz").json()["outstanding"]["a"] == 1)

    drain.write_text(json.dumps({"engines": ["a"]}))  # now a out, b back
    until(lambda: httpx.get(gateway.url + "/readyz").json()["engines"] == {"a": False, "b": True})
    for _ in range(5):
        assert httpx.post(gateway.url + "/v1/chat/completions", json=_chat()).status_code == 200
    # ... while the request it already had runs to its end, and then none is outstanding.
    thread.join(30)
    assert done == [200]
    engines = [r["engine"] for r in gateway.log_records()]
    assert sorted(engines) == ["a"] + ["b"] * 5, engines  # nothing new on the drained engine
    assert httpx.get(gateway.url + "/readyz").json()["outstanding"] == {"a": 0, "b": 0}

    drain.write_text("{broken")  # a half-written file keeps the last good list
    time.sleep(1.2)
    assert httpx.get(gateway.url + "/readyz").json()["engines"]["a"] is False
    drain.unlink()  # no file: nothing drained
    until(lambda: httpx.get(gateway.url + "/readyz").json()["engines"] == {"a": True, "b": True})


def _activated(config: Path, listener: socket.socket, out: Path) -> subprocess.Popen[bytes]:
    """`python -m service` as systemd starts a socket-activated unit: the socket on fd 3."""

    def as_systemd() -> None:
        os.dup2(listener.fileno(), 3)
        os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")

    with out.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "service"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            env=None, pass_fds=(3,) if _fd_open(3) else (), preexec_fn=as_systemd,
        )


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


@pytest.mark.parametrize("workers", [1, 2])  # 2: the supervisor takes fd 3 and forks (service/prefork.py)
def test_socket_activated_restart_queues_instead_of_refusing(
    start_upstream: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    upstream = start_upstream("--delay-ms", "150")
    port = free_port()
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump({
        "port": port, "allow_anonymous": True, "health_interval_s": 0.5, "drain_timeout_s": 20,
        "engines": [{"name": "e", "url": upstream.url, "model": "tiny"}], "workers": workers,
    }))
    monkeypatch.setenv("PLI_GATEWAY_CONFIG", str(config))
    # What systemd's gateway.socket does: it owns the listening socket across restarts.
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(512)
    url, out = f"http://127.0.0.1:{port}", tmp_path / "gw.out"
    old = _activated(config, listener, out)
    new = None
    try:
        wait_http(url + "/readyz", old)
        results: dict[str, Any] = {}

        def request(name: str, tokens: int) -> None:
            try:
                resp = httpx.post(url + "/v1/chat/completions", json=_chat(tokens), timeout=60,
                                  headers={"Connection": "close"})
                results[name] = resp.status_code
            except httpx.HTTPError as exc:
                results[name] = repr(exc)

        in_flight = threading.Thread(target=request, args=("in flight", 16))  # ~2.4 s of tokens
        in_flight.start()
        time.sleep(0.5)
        old.send_signal(signal.SIGTERM)  # the restart begins: the old process drains
        time.sleep(0.3)
        arriving = threading.Thread(target=request, args=("arriving", 2))  # during the gap
        arriving.start()
        old.wait(30)
        new = _activated(config, listener, out)  # systemd starts the new process
        in_flight.join(30)
        arriving.join(30)
        assert results == {"in flight": 200, "arriving": 200}, out.read_text()[-2000:]
        # uvicorn ends by re-raising the signal it caught: systemd counts that as a clean stop.
        assert old.returncode in (0, -signal.SIGTERM)
    finally:
        stop(old, signal.SIGKILL)
        if new is not None:
            stop(new, signal.SIGKILL)
        listener.close()
