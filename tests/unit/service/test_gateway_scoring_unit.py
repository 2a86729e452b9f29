"""/v1/rerank and /v1/score bodies: vLLM's shapes accepted (its optional fields passed through),
garbage refused before an engine sees it, and the token estimate that sizes the reservation."""

import json

import pytest
from pydantic import ValidationError

from service.config import EngineConfig
from service.limits import estimate_pair_tokens
from service.openai_api import ROUTE_TASKS, ROUTES
from service.schemas import RerankRequest, ScoreRequest


def test_rerank_accepts_vllms_shape_and_keeps_its_optional_fields() -> None:
    raw = json.dumps(
        {
            "model": "rr",
            "query": "capital of France",
            "documents": ["Paris", {"content": [{"type": "text", "text": "Lyon"}]}],
            "top_n": 1,
            "instruction": "judge",
            "use_activation": False,
            "truncate_prompt_tokens": 64,
        }
    )
    body = RerankRequest.model_validate_json(raw)
    queries, documents = body.pairs()
    assert queries == ["capital of France"] and len(documents) == 2
    dumped = body.model_dump(exclude_unset=True)
    assert dumped["instruction"] == "judge" and dumped["use_activation"] is False
    assert dumped["truncate_prompt_tokens"] == 64


@pytest.mark.parametrize(
    "wrong",
    [
        {"query": "q", "documents": ["d"]},  # no model: the gateway routes by it
        {"model": "rr", "documents": ["d"]},
        {"model": "rr", "query": "q"},
        {"model": "rr", "query": 5, "documents": ["d"]},
        {"model": "rr", "query": "q", "documents": [1, 2]},
        {"model": "rr", "query": "q", "documents": ["d"], "top_n": -1},
        {"model": "rr", "query": "q", "documents": ["d"], "top_n": "3"},
        {"model": "rr", "query": "q", "documents": [{"content": []}]},
        {"model": "rr", "query": "q", "documents": ["d"], "max_tokens_per_doc": -5},
    ],
)
def test_rerank_refuses_garbage(wrong: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RerankRequest.model_validate_json(json.dumps(wrong))


@pytest.mark.parametrize(
    ("pair", "first", "second"),
    [
        ({"text_1": "q", "text_2": ["a", "b"]}, ["q"], ["a", "b"]),
        ({"queries": ["q1", "q2"], "documents": ["a", "b"]}, ["q1", "q2"], ["a", "b"]),
        ({"queries": "q", "items": ["a"]}, ["q"], ["a"]),
        ({"data_1": "q", "data_2": "a"}, ["q"], ["a"]),
    ],
)
def test_score_takes_any_one_of_vllms_four_pairs(
    pair: dict[str, object], first: list[str], second: list[str]
) -> None:
    body = ScoreRequest.model_validate_json(json.dumps({"model": "rr", **pair}))
    assert body.pairs() == (first, second)


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        ({"model": "rr"}, "exactly one pair"),
        ({"model": "rr", "text_1": "q"}, "exactly one pair"),
        ({"model": "rr", "text_1": "q", "text_2": "a", "data_1": "q", "data_2": "a"}, "exactly one pair"),
        ({"model": "rr", "queries": "q", "documents": ["a"], "items": ["b"]}, "exactly one pair"),
        ({"model": "rr", "text_1": "q", "text_2": "a", "data_1": "x"}, "data_1 cannot be given"),
        ({"model": "rr", "text_1": 3, "text_2": "a"}, "text_1"),
    ],
)
def test_score_refuses_missing_mixed_or_wrong_pairs(wrong: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        ScoreRequest.model_validate_json(json.dumps(wrong))


def test_pair_estimate_counts_the_query_once_per_document() -> None:
    query, docs = "x" * 30, ["y" * 30, "z" * 30, "w" * 30]  # 11 tokens each (one per 3 chars, +1)
    assert estimate_pair_tokens([query], docs) == 3 * 11 + 3 * 11
    # pairwise (N:N): each side once
    assert estimate_pair_tokens(docs, docs) == 6 * 11
    # one document against many queries
    assert estimate_pair_tokens(docs, [query]) == 6 * 11


def test_routes_and_tasks() -> None:
    assert ROUTES["/v1/rerank"] is RerankRequest and ROUTES["/v1/score"] is ScoreRequest
    assert set(ROUTE_TASKS) == set(ROUTES)
    # vLLM 0.32 answers rerank/score with an embedding model too (cosine), never with a generator
    assert ROUTE_TASKS["/v1/rerank"] == ROUTE_TASKS["/v1/score"] == {"score", "embed"}
    assert EngineConfig(name="r", url="http://127.0.0.1:1", model="rr", task="score").task == "score"


def test_pair_estimate_counts_each_part_of_a_multi_modal_input_as_a_document() -> None:
    # vLLM reads documents {"content": [N parts]} as N documents: the query is paired with each.
    query = "x" * 30  # 11 tokens
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}  # 64 tokens
    body = RerankRequest.model_validate({"model": "rr", "query": query, "documents": {"content": [image] * 3}})
    assert estimate_pair_tokens(*body.pairs()) == 3 * 11 + 3 * 64
