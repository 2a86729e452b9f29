"""schemathesis against the gateway's own OpenAPI schema: generated requests (valid and not)
to every operation, with a valid key, in front of the fast fake engine. No answer may be a 5xx
the gateway made itself: bad input is a 4xx with OpenAI's error body."""

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def gateway(start_upstream: Any, start_gateway: Any, keys: Any) -> tuple[str, str]:
    upstream = start_upstream()
    embedder = start_upstream(model="embedder")
    reranker = start_upstream(model="reranker")
    secret = keys.create("fuzz")
    gw = start_gateway({
        "keys_file": str(keys.hosts_file),
        "docs": True,  # the schema is served only when asked for
        "health_interval_s": 60,
        "limits": {"max_body_bytes": 64 * 1024},
        "engines": [
            {"name": "e1", "url": upstream.url, "model": "tiny"},
            {"name": "emb", "url": embedder.url, "model": "embedder", "task": "embed"},
            {"name": "rr", "url": reranker.url, "model": "reranker", "task": "score"},
        ],
    })
    return gw.url, secret


def test_no_server_errors(gateway: tuple[str, str]) -> None:
    # Driven by hand rather than by schemathesis' pytest plugin, whose fixture loader does not
    # work with this pytest; the checks are the same.
    url, secret = gateway
    api = schemathesis.openapi.from_url(url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "GET /v1/models", "POST /v1/chat/completions", "POST /v1/completions", "POST /v1/embeddings",
        "POST /v1/rerank", "POST /v1/score",
    }
    seen: dict[str, set[int]] = {}
    for op in operations:
        _fuzz(op, secret, seen.setdefault(op.label, set()))
    # The generated requests reached the engines, not only the validation in front of them.
    for label in ("POST /v1/chat/completions", "POST /v1/completions", "POST /v1/embeddings", "POST /v1/rerank"):
        assert 200 in seen[label] and seen[label] & {400, 404, 422}, seen


SERVED = {"/v1/embeddings": "embedder", "/v1/rerank": "reranker", "/v1/score": "reranker"}


def _fuzz(op: Any, secret: str, statuses: set[int]) -> None:
    @given(case=op.as_strategy(), served=st.booleans())
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def one(case: Any, served: bool) -> None:
        # Random model names are all 404s: half the time, name a model the engines serve.
        if served and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = SERVED.get(op.path, "tiny")
        response = case.call(headers={"Authorization": f"Bearer {secret}"}, timeout=30)
        statuses.add(response.status_code)
        assert response.status_code < 500, (case.as_curl_command(), response.status_code, response.text[:500])
        if response.status_code >= 400:
            error = response.json()["error"]
            assert isinstance(error["message"], str) and error["type"]

    one()
