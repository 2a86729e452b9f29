"""A real redis-server on a free loopback port, without persistence unless given options that
turn it on, stopped by its PID."""

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.loopback import free_port, stop

MISSING = "redis-server is not installed: apt-get install redis-server (or run .ci/setup)"


@contextmanager
def redis_server(
    workdir: Path, options: list[str] | None = None, port: int | None = None, config: Path | None = None
) -> Iterator[str]:
    """Yield the URL of a redis-server that answers PING; fail (never skip) if there is none.
    `options` replace the default of no persistence (`--name value` pairs); `port` reuses one.
    `config`: a redis.conf as the redis role writes it, which names the port and address itself
    (it is run unsupervised, its data in `workdir`; a password makes PING answer NOAUTH)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(MISSING)
    port = port or free_port()
    persistence = ["--save", "", "--appendonly", "no"] if options is None else options
    argv = [server, "--port", str(port), "--bind", "127.0.0.1", *persistence]
    if config is not None:
        argv = [server, str(config), "--supervised", "no", *(options or [])]
    proc = subprocess.Popen([*argv, "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(proc)
