"""The gateway relays its engines' /metrics (service/engine_metrics.py), which is how Prometheus
reaches engines that listen on loopback: the real `python -m service` process, an engine
stand-in serving vLLM-style metrics on loopback, and an engine that is down."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.engine_metrics import METRICS, metrics_engine
from tests.support.loopback import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def engine_url() -> Iterator[str]:
    with metrics_engine() as url:
        yield url


def test_engine_metrics_relayed_and_a_down_engine_is_a_503(start_gateway: Any, engine_url: str,
                                                           scrape_token: Any) -> None:
    gateway = start_gateway({
        "allow_anonymous": True,
        "metrics_token_file": str(scrape_token.file),
        "engines": [
            {"name": "h1", "url": engine_url, "model": "tiny"},
            {"name": "h2", "url": f"http://127.0.0.1:{free_port()}", "model": "tiny"},  # nothing listens
        ],
    }, wait_ready=False)
    got = httpx.get(gateway.url + "/metrics/engines/h1", headers=scrape_token.headers)
    assert got.status_code == 200
    assert got.content == METRICS
    assert got.headers["content-type"].startswith("text/plain; version=0.0.4")
    down = httpx.get(gateway.url + "/metrics/engines/h2", headers=scrape_token.headers)
    assert down.status_code == 503 and "unreachable" in down.text  # Prometheus records up == 0
    # Only configured engines: the relay is no proxy to arbitrary places.
    assert httpx.get(gateway.url + "/metrics/engines/elsewhere", headers=scrape_token.headers).status_code == 404
    # Without Prometheus's token even a configured engine's metrics are refused.
    assert httpx.get(gateway.url + "/metrics/engines/h1").status_code == 401
