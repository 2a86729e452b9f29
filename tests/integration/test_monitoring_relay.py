"""The gateway relays its engines' /metrics (service/engine_metrics.py), which is how Prometheus
reaches engines that listen on loopback: the real `python -m service` process, an engine
stand-in serving vLLM-style metrics on loopback, and an engine that is down."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration
METRICS = b'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="tiny"} 3.0\n'


class _Engine(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body, status = (METRICS, 200) if self.path == "/metrics" else (b"", 404)
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def engine_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_engine_metrics_relayed_and_a_down_engine_is_a_503(start_gateway: Any, engine_url: str) -> None:
    gateway = start_gateway({
        "allow_anonymous": True,
        "engines": [
            {"name": "h1", "url": engine_url, "model": "tiny"},
            {"name": "h2", "url": f"http://127.0.0.1:{free_port()}", "model": "tiny"},  # nothing listens
        ],
    }, wait_ready=False)
    got = httpx.get(gateway.url + "/metrics/engines/h1")
    assert got.status_code == 200
    assert got.content == METRICS
    assert got.headers["content-type"].startswith("text/plain; version=0.0.4")
    down = httpx.get(gateway.url + "/metrics/engines/h2")
    assert down.status_code == 503 and "unreachable" in down.text  # Prometheus records up == 0
    # Only configured engines: the relay is no proxy to arbitrary places.
    assert httpx.get(gateway.url + "/metrics/engines/elsewhere").status_code == 404
