"""The gateway's metrics name every API key and count its traffic, and its API documents map its
whole surface: on the API port, by default, none of it is served; metrics only to a request that
shows Prometheus's scrape token (service/scrape_auth.py), never to an API key; documents only
when the settings ask for them. The real `python -m service`, on loopback."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.engine_metrics import METRICS, metrics_engine
from tests.support import REPO
from tests.support.loopback import free_port

pytestmark = pytest.mark.integration

KEY_NAME = "acme-payroll-team"  # what an anonymous reader must not learn
PRIVATE = ("/metrics", "/metrics/engines/e1", "/metrics/engines/m1", "/docs", "/redoc", "/openapi.json",
           "/docs/oauth2-redirect")


@pytest.fixture
def engine_metrics_url() -> Iterator[str]:
    with metrics_engine() as url:
        yield url


@pytest.fixture
def gateway_with(start_upstream: Any, start_gateway: Any, keys: Any, engine_metrics_url: str) -> Any:
    """start(**settings) -> (gateway, API key), after one request by KEY_NAME was counted."""

    def start(**settings: Any) -> tuple[Any, str]:
        upstream = start_upstream()
        secret = keys.create(KEY_NAME)
        gateway = start_gateway({
            "keys_file": str(keys.hosts_file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"},
                        {"name": "m1", "url": engine_metrics_url, "model": "other"}],
            **settings,
        }, wait_ready=False)
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        done = httpx.post(gateway.url + "/v1/chat/completions", json=chat,
                          headers={"Authorization": f"Bearer {secret}"}, timeout=10)
        assert done.status_code == 200, done.text
        return gateway, secret

    return start


def _refused(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    got = httpx.get(url, headers=headers, timeout=5)
    assert got.status_code in (401, 404), (url, got.status_code)
    assert KEY_NAME not in got.text and "pli_gateway" not in got.text, url
    return got


def test_by_default_the_api_port_serves_neither_metrics_nor_documents(gateway_with: Any) -> None:
    gateway, secret = gateway_with()
    for path in PRIVATE:
        # Not even to a client with a valid key: metrics would show it every other key's name.
        for headers in (None, {"Authorization": f"Bearer {secret}"}):
            assert _refused(gateway.url + path, headers).status_code == 404, path


def test_metrics_answer_only_the_scrape_token(gateway_with: Any, scrape_token: Any) -> None:
    gateway, secret = gateway_with(metrics_token_file=str(scrape_token.file))
    token = scrape_token.headers["Authorization"].removeprefix("Bearer ")
    wrong = [None, {"Authorization": f"Bearer {secret}"}, {"Authorization": f"Bearer {token[:-1]}x"},
             {"Authorization": f"Basic {token}"}, {"Authorization": token}, {"Authorization": "Bearer"}]
    for path in ("/metrics", "/metrics/engines/m1", "/metrics/engines/nosuch"):
        for headers in wrong:
            got = _refused(gateway.url + path, headers)
            assert got.status_code == 401 and got.headers["www-authenticate"] == "Bearer", (path, headers)
            assert got.json()["error"]["code"] == "invalid_scrape_token"
    text = httpx.get(gateway.url + "/metrics", headers=scrape_token.headers).text
    assert f'pli_gateway_requests_total{{key="{KEY_NAME}",model="tiny",status="200"}} 1.0' in text
    relayed = httpx.get(gateway.url + "/metrics/engines/m1", headers=scrape_token.headers)
    assert relayed.status_code == 200 and relayed.content == METRICS
    for path in ("/docs", "/redoc", "/openapi.json"):  # the token opens metrics, nothing else
        assert _refused(gateway.url + path, scrape_token.headers).status_code == 404, path


def test_a_separate_metrics_port_asks_for_the_token_too(gateway_with: Any, scrape_token: Any) -> None:
    port = free_port()
    gateway, _ = gateway_with(metrics_token_file=str(scrape_token.file), metrics_host="127.0.0.1",
                              metrics_port=port)
    for path in ("/metrics", "/metrics/engines/m1"):
        assert _refused(gateway.url + path, scrape_token.headers).status_code == 404, path
    separate = f"http://127.0.0.1:{port}/metrics"
    got = _refused(separate)
    assert got.status_code == 401 and got.json()["error"]["code"] == "invalid_scrape_token"
    assert _refused(separate, {"Authorization": "Bearer " + "0" * 64}).status_code == 401
    text = httpx.get(separate, headers=scrape_token.headers).text
    assert f'key="{KEY_NAME}"' in text


def test_documents_only_when_asked_for(gateway_with: Any) -> None:
    gateway, _ = gateway_with(docs=True)
    schema = httpx.get(gateway.url + "/openapi.json").json()
    assert "/v1/chat/completions" in schema["paths"]
    assert not any(p.startswith("/metrics") for p in schema["paths"])
    for path in ("/docs", "/redoc"):
        assert httpx.get(gateway.url + path).status_code == 200, path
    assert httpx.get(gateway.url + "/metrics").status_code == 404  # documents do not open metrics


@pytest.mark.parametrize(("token", "message"), [
    (None, "No such file or directory; the installer writes it"),
    ("short-token\n", "holds a token of 11 characters; write one of at least 32"),
])
def test_a_missing_or_weak_token_file_stops_the_start(tmp_path: Path, token: str | None, message: str) -> None:
    token_file = tmp_path / "metrics.token"
    if token is not None:
        token_file.write_text(token)
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "port": free_port(), "allow_anonymous": True, "metrics_token_file": str(token_file),
        "engines": [{"name": "e1", "url": "http://127.0.0.1:9", "model": "tiny"}],
    }))
    proc = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PLI_GATEWAY_CONFIG": str(config)}, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and str(token_file) in proc.stderr
