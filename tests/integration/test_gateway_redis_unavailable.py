"""limits.redis_on_unavailable with real gateways and a real redis-server stopped mid-test: a
gateway left `open` admits a limited key without its limits, a `closed` one refuses keys with a
limit or a quota with 503 (OpenAI's error body, Retry-After), and both count every such check in
pli_gateway_redis_unavailable_total."""

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.redis_outage import RETRY_AFTER_S
from tests.support.redis_server import redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _post(gateway: Any, secret: str) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions", json=_CHAT, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )


def _unavailable(gateway: Any, headers: dict[str, str]) -> dict[tuple[str, str], float]:
    """The counter's series that are not 0 (every series exists from the start, at 0)."""
    text = httpx.get(gateway.url + "/metrics", headers=headers, timeout=10).text
    found = re.findall(r'^pli_gateway_redis_unavailable_total\{action="(\w+)",check="(\w+)"\} (\S+)$', text, re.M)
    return {(check, action): float(value) for action, check, value in found if float(value)}


def test_open_admits_and_closed_refuses_when_redis_stops(
    start_upstream: Any,
    start_gateway: Any,
    keys: Any,
    scrape_token: Any,
    tmp_path: Path,
) -> None:
    upstream = start_upstream()
    limited = keys.create("limited", rpm=100)
    quota = keys.create("quota", quota_tokens=100_000, quota_period="day")
    free = keys.create("free")
    data = tmp_path / "redis"
    data.mkdir()
    with ExitStack() as redis:
        url = redis.enter_context(redis_server(data))
        config = {
            "keys_file": str(keys.hosts_file),
            "metrics_token_file": str(scrape_token.file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
        open_gw = start_gateway({**config, "limits": {"redis_url": url}})
        closed_gw = start_gateway({**config, "limits": {"redis_url": url, "redis_on_unavailable": "closed"}})
        for gw in (open_gw, closed_gw):
            assert [_post(gw, s).status_code for s in (limited, quota, free)] == [200, 200, 200]
            assert _unavailable(gw, scrape_token.headers) == {}
            metrics = httpx.get(gw.url + "/metrics", headers=scrape_token.headers).text
            assert "pli_gateway_redis_unavailable_total{" in metrics
    # redis-server is stopped (by its PID) from here on

    assert _post(open_gw, limited).status_code == 200
    assert _post(open_gw, quota).status_code == 200
    assert _unavailable(open_gw, scrape_token.headers) == {("limits", "admitted"): 1, ("quota", "admitted"): 1}

    for secret, check in ((limited, "rate limits"), (quota, "token quota")):
        refused = _post(closed_gw, secret)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == str(RETRY_AFTER_S)
        error = refused.json()["error"]
        assert error["type"] == "server_error" and error["code"] == "limits_unavailable"
        assert check in error["message"]
    # a key with neither a limit nor a quota needs nothing from Redis to be admitted
    assert _post(closed_gw, free).status_code == 200
    assert _unavailable(closed_gw, scrape_token.headers) == {("limits", "refused"): 1, ("quota", "refused"): 1}
