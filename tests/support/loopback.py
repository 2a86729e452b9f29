"""Real processes on loopback (a fake engine, the gateway, redis-server): a free port to give
them, waiting until they answer, and stopping them by their PID."""

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str, proc: subprocess.Popen[bytes], timeout: float = 90.0, status: int = 200
) -> None:
    # A start deadline, not a speed check: a gateway took 10-27 s to start on the shared 2-core
    # machine (docs/testing.md), so 20 s failed set-ups; a process that dies is still caught at once.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1).status_code == status:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer {status} within {timeout} s")


def until(check: Callable[[], Any], timeout: float = 5.0) -> None:
    """Poll `check` every 50 ms until it is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def seconds_until(check: Callable[[], Any], timeout: float, what: str) -> float:
    """Seconds until `check` held (polled every 50 ms); fails with `what` after `timeout`."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, what
        time.sleep(0.05)
    return time.monotonic() - start


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
