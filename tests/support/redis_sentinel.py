"""A replicated Redis as a deployment with several serving hosts runs it, on loopback: a primary,
a replica and three sentinels, all TLS-only with the deployment CA and a password, each a real
process stopped by its PID. The options are the redis role's (playbooks/roles/redis/templates/),
passed as arguments, with the sentinels' timings as `sentinel_timings` gives them."""

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.loopback import free_port, stop
from tests.support.redis_server import MISSING


@dataclass
class Node:
    port: int
    proc: subprocess.Popen[bytes]


@dataclass
class ReplicatedRedis:
    password: str
    primary: Node
    replica: Node
    sentinels: list[Node] = field(default_factory=list)

    @property
    def sentinel_addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.sentinels]


def _tls(ca: Path, cert: Path, key: Path) -> list[str]:
    return ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
            "--tls-auth-clients", "yes", "--tls-replication", "yes", "--port", "0"]


def _wait_tls(port: int, proc: subprocess.Popen[bytes], ctx: ssl.SSLContext) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw, \
                    ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                    return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.05)


@contextmanager
def replicated_redis(
    workdir: Path, ca: Path, cert: Path, key: Path, password: str, down_after_ms: int, failover_timeout_ms: int,
) -> Iterator[ReplicatedRedis]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(MISSING)
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    tls = _tls(ca, cert, key)
    auth = ["--requirepass", password, "--masterauth", password]
    with ExitStack() as stack:
        def start(argv: list[str], port: int, name: str) -> Node:
            (workdir / name).mkdir()
            proc = subprocess.Popen([*argv, "--dir", str(workdir / name)], stdout=subprocess.DEVNULL)
            stack.callback(stop, proc)
            _wait_tls(port, proc, ctx)
            return Node(port, proc)

        p1, p2 = free_port(), free_port()
        base = [server, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *tls, *auth]
        primary = start([*base, "--tls-port", str(p1)], p1, "primary")
        replica = start([*base, "--tls-port", str(p2), "--replicaof", "127.0.0.1", str(p1)], p2, "replica")
        found = ReplicatedRedis(password, primary, replica)
        for i in range(3):
            port = free_port()
            conf = workdir / f"sentinel-{i}.conf"  # a sentinel rewrites its file: one each
            conf.write_text(
                f"bind 127.0.0.1\nport 0\ntls-port {port}\n"
                f"tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n"
                "tls-auth-clients yes\ntls-replication yes\n"
                f"requirepass {password}\n"
                f"sentinel monitor pli 127.0.0.1 {p1} 2\n"
                f"sentinel auth-pass pli {password}\n"
                f"sentinel sentinel-pass {password}\n"
                f"sentinel down-after-milliseconds pli {down_after_ms}\n"
                f"sentinel failover-timeout pli {failover_timeout_ms}\n"
            )
            conf.chmod(0o600)
            found.sentinels.append(start([server, str(conf), "--sentinel"], port, f"s{i}"))
        yield found


def sentinels_ready(clients: list[Any], replica_port: int, master: str = "pli") -> bool:
    """Every sentinel knows the other two and sees the replica linked to the primary. Sentinels
    learn replicas from the primary's INFO, every 10 s: until then a failover finds "no good
    slave" (seen in this test), so a test kills the primary only after this."""
    for sentinel in clients:
        if len(sentinel.sentinel_sentinels(master)) != len(clients) - 1:
            return False
        linked = [r for r in sentinel.sentinel_slaves(master)
                  if int(r["port"]) == replica_port and r.get("is_slave") and not r.get("is_sdown")
                  and not r.get("is_disconnected") and r.get("master-link-status") == "ok"]
        if not linked:
            return False
    return True
