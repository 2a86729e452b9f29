"""The gateway relays /v1/rerank and /v1/score to cross-encoder engines (task: score) the way it
relays /v1/embeddings: by model name, limited to the models a key may use, accounted from the
engine's usage; a route sent to a model of another task is refused with the model's task."""

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from installer.hosts import prove
from installer.inventory.loader import load_inventory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def setup(start_upstream, start_gateway, keys: Any) -> Any:
    chat = start_upstream()
    embedder = start_upstream(model="embedder")
    reranker = start_upstream(model="reranker")
    secrets = {"all": keys.create("app"), "rr": keys.create("rr-only", models=["reranker"])}
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "health_interval_s": 60,  # no readiness probe lands in the engines' request counts
            "engines": [
                {"name": "chat", "url": chat.url, "model": "tiny"},
                {"name": "emb", "url": embedder.url, "model": "embedder", "task": "embed"},
                {"name": "rr", "url": reranker.url, "model": "reranker", "task": "score"},
            ],
        }
    )
    return gateway, {"chat": chat, "emb": embedder, "rr": reranker}, secrets


def _inventory(tmp_path: Path, gateway_url: str) -> Any:
    """One serving host on loopback (this gateway) with the three models of the fixture."""
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    (weights / "config.json").write_text("{}")
    port = gateway_url.rsplit(":", 1)[1]
    path = tmp_path / "site.yml"
    path.write_text(
        f"""deployment: demo
hosts:
  - {{name: h1, address: 127.0.0.1}}
ports: {{gateway: {port}}}
tls: {{mode: "off"}}
models:
  - {{name: chat, served_name: tiny, path: {weights}}}
  - {{name: emb, served_name: embedder, path: {weights}, task: embed}}
  - {{name: rr, served_name: reranker, path: {weights}, task: score, hosts: [h1]}}
"""
    )
    return load_inventory(path)


def _post(gateway: Any, secret: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.url + path, headers={"Authorization": f"Bearer {secret}"}, json=body)


def test_rerank_and_score_are_relayed_with_vllms_fields(setup: Any) -> None:
    gateway, ups, secrets = setup
    body = {
        "model": "reranker",
        "query": "paris france capital",
        "documents": ["berlin germany", "paris is the capital", "a capital"],
        "top_n": 2,
        "instruction": "rank by relevance",  # vLLM's optional field: passed through untouched
    }
    resp = _post(gateway, secrets["all"], "/v1/rerank", body)
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert [r["index"] for r in results] == [1, 2] and results[0]["relevance_score"] > 0
    assert json.loads(ups["rr"].stats()["last_body"]) == body

    resp = _post(gateway, secrets["all"], "/v1/score", {"model": "reranker", "text_1": "a b", "text_2": ["a", "c"]})
    assert resp.status_code == 200, resp.text
    assert [d["score"] for d in resp.json()["data"]] == [1.0, 0.0]

    # accounted like any request: the engine's usage in the access log
    records = [r for r in gateway.log_records() if r.get("path") in ("/v1/rerank", "/v1/score")]
    assert [r["status"] for r in records] == [200, 200]
    assert records[0]["model"] == "reranker" and records[0]["prompt_tokens"] == 3 * 3 + 2 + 4 + 2


def test_a_route_reaches_only_models_of_its_task(setup: Any) -> None:
    gateway, ups, secrets = setup
    before = {name: up.stats()["requests"] for name, up in ups.items()}
    cases = [
        ("/v1/embeddings", {"model": "tiny", "input": "x"}, "generate"),
        ("/v1/embeddings", {"model": "reranker", "input": "x"}, "score"),
        ("/v1/rerank", {"model": "tiny", "query": "q", "documents": ["d"]}, "generate"),
        ("/v1/score", {"model": "tiny", "text_1": "q", "text_2": "d"}, "generate"),
        ("/v1/chat/completions", {"model": "reranker", "messages": [{"role": "user", "content": "x"}]}, "score"),
        ("/v1/completions", {"model": "embedder", "prompt": "x"}, "embed"),
    ]
    for path, body, task in cases:
        resp = _post(gateway, secrets["all"], path, body)
        assert resp.status_code == 400, (path, body, resp.text)
        error = resp.json()["error"]
        assert error["code"] == "model_task_mismatch" and error["param"] == "model"
        assert f"is a {task} model" in error["message"] and path in error["message"]
    # refused before any engine saw them
    assert {name: up.stats()["requests"] for name, up in ups.items()} == before


def test_garbage_is_refused_before_the_engine(setup: Any) -> None:
    gateway, ups, secrets = setup
    before = ups["rr"].stats()["requests"]  # the readiness probe's, a rerank
    assert json.loads(ups["rr"].stats()["last_body"]) == {"model": "reranker", "query": "ping", "documents": ["ping"]}
    for path, body in [
        ("/v1/rerank", {"model": "reranker", "query": "q"}),
        ("/v1/rerank", {"model": "reranker", "query": "q", "documents": [1]}),
        ("/v1/score", {"model": "reranker", "text_1": "q"}),
        ("/v1/score", {"model": "reranker", "text_1": "q", "text_2": "d", "queries": "q", "documents": "d"}),
    ]:
        resp = _post(gateway, secrets["all"], path, body)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request", resp.text
    assert ups["rr"].stats()["requests"] == before


def test_a_key_limited_to_one_model_is_refused_the_others(setup: Any) -> None:
    gateway, _, secrets = setup
    limited = secrets["rr"]
    rerank = {"model": "reranker", "query": "q", "documents": ["q"]}
    assert _post(gateway, limited, "/v1/rerank", rerank).status_code == 200
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=limited)
    assert [m.id for m in client.models.list()] == ["reranker"]
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="embedder", input="x")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}])
    # the key's own reranker, through the other route, still answers
    assert _post(gateway, limited, "/v1/score", {"model": "reranker", "text_1": "q", "text_2": "q"}).status_code == 200


def test_the_proof_asks_each_model_for_its_task(setup: Any) -> None:
    gateway, ups, secrets = setup
    for model, task, says in [("tiny", "generate", "chat via gateway"), ("embedder", "embed", "embeddings via gateway"),
                              ("reranker", "score", "rerank via gateway")]:
        proof = prove.prove_host(gateway.url, "h1", model, secrets["all"], task=task)
        assert proof.ok and proof.detail.startswith(says), proof
    assert json.loads(ups["rr"].stats()["last_body"])["documents"] == prove.RERANK_DOCUMENTS
    # a model asked for another task's request fails its proof, saying why
    proof = prove.prove_host(gateway.url, "h1", "tiny", secrets["all"], task="score")
    assert not proof.ok and proof.detail.startswith("rerank through the gateway: 400 The model 'tiny' is a generate")


def test_prove_covers_every_model_the_host_serves(setup: Any, tmp_path: Path) -> None:
    gateway, ups, secrets = setup
    inv = _inventory(tmp_path, gateway.url)
    before = {name: up.stats()["requests"] for name, up in ups.items()}
    [proof] = prove.prove(inv, secrets["all"])
    assert proof.ok and proof.host == "h1", proof
    parts = proof.detail.split("; ")
    assert [p.split(": ")[0] for p in parts] == ["tiny", "embedder", "reranker"]
    assert [p.split(": ")[1].split(" via ")[0] for p in parts] == ["chat", "embeddings", "rerank"]
    after = {name: up.stats()["requests"] for name, up in ups.items()}
    assert {name: after[name] - before[name] for name in ups} == {"chat": 1, "emb": 1, "rr": 1}

    # a model the host cannot serve fails the host's proof, naming the model
    [proof] = prove.prove(inv, secrets["rr"])  # a key limited to the reranker
    assert not proof.ok and proof.detail.startswith("tiny: chat completion through the gateway: 404"), proof
