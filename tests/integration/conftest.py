"""Generic fixtures for tests that run real processes on loopback: a fake OpenAI-compatible
engine, the gateway (`python -m service`) and redis-server. Each listens on a free port and is
stopped by its PID."""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from installer.secrets import keys as installer_keys
from tests.support import REPO
from tests.support.loopback import free_port, stop, wait_http
from tests.support.redis_server import redis_server

FAKE_UPSTREAM = REPO / "benchmarks" / "fake_upstream.py"


@dataclass
class Upstream:
    url: str
    proc: subprocess.Popen[bytes]

    def stats(self) -> dict[str, Any]:
        return httpx.get(self.url + "/_stats").json()


@dataclass
class Gateway:
    url: str
    proc: subprocess.Popen[bytes]
    access_log: Path
    output: Path

    def log_records(self) -> list[dict[str, Any]]:
        time.sleep(0.3)  # the access log is flushed every 0.2 s
        return [json.loads(line) for line in self.access_log.read_text().splitlines() if line]


@pytest.fixture
def start_upstream() -> Iterator[Callable[..., Upstream]]:
    """start_upstream("--model", "m", "--delay-ms", "5") -> a running fake engine."""
    yield from _upstreams()


@pytest.fixture(scope="module")
def module_upstream() -> Iterator[Callable[..., Upstream]]:
    """start_upstream's, shared by a module's tests: starting one takes seconds on a loaded
    machine, so a module whose tests only send requests to it starts it once."""
    yield from _upstreams()


def _upstreams() -> Iterator[Callable[..., Upstream]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, model: str = "tiny") -> Upstream:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, str(FAKE_UPSTREAM), "--port", str(port), "--model", model, *args]
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/v1/models", proc)
        return Upstream(url, proc)

    yield start
    for proc in procs:
        stop(proc, signal.SIGKILL)


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """start_gateway({"engines": [...], ...}) -> a running `python -m service`, ready."""
    yield from _gateways(tmp_path)


@pytest.fixture(scope="module")
def module_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Gateway]]:
    """start_gateway's, shared by a module's tests that do not change the gateway (its counters
    are shared too: such a test compares them before and after its own requests)."""
    yield from _gateways(tmp_path_factory.mktemp("gateway"))


def _gateways(tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(config: dict[str, Any], wait_ready: bool = True) -> Gateway:
        n = len(procs)
        port = free_port()
        access_log = tmp_path / f"access-{n}.jsonl"
        config = {"port": port, "health_interval_s": 0.5, "access_log": str(access_log), **config}
        path = tmp_path / f"gateway-{n}.yaml"
        path.write_text(yaml.safe_dump(config))
        output = tmp_path / f"gateway-{n}.out"
        env = {**os.environ, "PLI_GATEWAY_CONFIG": str(path)}
        with output.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "service"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + ("/readyz" if wait_ready else "/livez"), proc)
        return Gateway(url, proc, access_log, output)

    yield start
    for proc in procs:
        stop(proc, signal.SIGKILL)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


class Keys:
    """Keys made with the control machine's store (installer.secrets.keys), rendered to a hosts' file
    the way a deploy does; every change rewrites that file, as a deploy would."""

    def __init__(self, root: Path) -> None:
        self.store = root / "keys.json"
        self.hosts_file = root / "keys.hosts.json"
        installer_keys.write_hosts_file(self.hosts_file, installer_keys.load(self.store))

    def create(self, name: str, **limits: Any) -> str:
        _, secret = installer_keys.create(name, path=self.store, **limits)
        installer_keys.write_hosts_file(self.hosts_file, installer_keys.load(self.store))
        return secret

    def revoke(self, name: str) -> None:
        installer_keys.revoke(name, path=self.store)
        installer_keys.write_hosts_file(self.hosts_file, installer_keys.load(self.store))


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@dataclass
class ScrapeToken:
    """Prometheus's token for the gateway's metrics (service/scrape_auth.py), in a 0600 file."""

    file: Path
    headers: dict[str, str]


@pytest.fixture
def scrape_token(tmp_path: Path) -> ScrapeToken:
    return _scrape_token(tmp_path)


@pytest.fixture(scope="module")
def module_scrape_token(tmp_path_factory: pytest.TempPathFactory) -> ScrapeToken:
    return _scrape_token(tmp_path_factory.mktemp("scrape"))


def _scrape_token(tmp_path: Path) -> ScrapeToken:
    token = secrets.token_hex(32)
    path = tmp_path / "metrics.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return ScrapeToken(path, {"Authorization": f"Bearer {token}"})
