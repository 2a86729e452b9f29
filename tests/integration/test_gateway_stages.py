"""Gray releases in the real gateway (two workers): the stages file splits a model's callers,
a session sticks to its stage, the header override reaches a stage whatever the weights, a
canary that fails before its first byte is retried on stable without the client seeing it,
and every attempt is counted by stage and outcome (bad_output for an empty or unfinished
answer) in the metrics the release watch reads."""

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.loopback import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CLOSE = {"Connection": "close"}  # new connections: both workers serve some


def _chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "stream": stream, **extra}


def _write_stages(path: Path, canary: int, sticky: str = "key", **extra: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(
        {"models": {"tiny": {"weights": {"stable": 100 - canary, "canary": canary}, "sticky": sticky, **extra}}}
    ))
    os.replace(tmp, path)


def _gateway(start_gateway: Any, scrape_token: Any, stable: Any, canary: Any, **settings: Any) -> Any:
    return start_gateway({
        "allow_anonymous": True, "workers": 2, "metrics_token_file": str(scrape_token.file),
        "engines": [
            {"name": "s1", "url": stable.url, "model": "tiny"},
            {"name": "s1-canary", "url": canary.url, "model": "tiny", "stage": "canary"},
        ],
        **settings,
    })


def _stage_counts(gateway: Any, scrape_token: Any) -> dict[tuple[str, str], float]:
    """(stage, outcome) -> attempts, and (stage, "ttft_count"/"ttft_sum") from the histogram."""
    text = httpx.get(gateway.url + "/metrics", headers={**CLOSE, **scrape_token.headers}).text
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") != "tiny":
                continue
            if sample.name == "pli_gateway_stage_requests_total":
                counts[(labels["stage"], labels["outcome"])] = sample.value
            elif sample.name == "pli_gateway_unjudged_requests_total":  # "forced:canary", "key_share:stable"
                counts[(f"{labels['reason']}:{labels['stage']}", labels["outcome"])] = sample.value
            elif sample.name in ("pli_gateway_stage_ttft_seconds_count", "pli_gateway_stage_ttft_seconds_sum"):
                counts[(labels["stage"], sample.name.rsplit("_", 1)[1])] = sample.value
            elif sample.name == "pli_gateway_stage_request_duration_seconds_count":
                counts[(labels["stage"], "duration_count")] = sample.value
    return counts


def _answer(resp: httpx.Response) -> str:
    """The generated text of a whole or streamed chat answer."""
    if not resp.headers["content-type"].startswith("text/event-stream"):
        return str(resp.json()["choices"][0]["message"]["content"])
    text = ""
    for line in resp.text.splitlines():
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            assert "error" not in event, event
            text += "".join(c["delta"].get("content") or "" for c in event["choices"])
    assert resp.text.endswith("data: [DONE]\n\n")
    return text


@pytest.mark.parametrize("fault", ["refused", "http_500", "silent", "silent_stream"])
def test_a_failing_canary_is_retried_on_stable(
    start_upstream: Any, start_gateway: Any, scrape_token: Any, tmp_path: Path, fault: str
) -> None:
    fakes = {"http_500": {"status": 500}, "silent": {"stall_s": 30}, "silent_stream": {"stall_s": 30}}
    stable = start_upstream()
    canary = start_upstream("--chat-fake", json.dumps(fakes.get(fault, {})))
    stages = tmp_path / "stages.json"
    _write_stages(stages, 100)  # every caller's first attempt is the canary's
    gateway = _gateway(
        start_gateway, scrape_token, stable, canary, stages_file=str(stages),
        canary_first_byte_timeout_s=0.5, canary_answer_timeout_s=0.5,
        # Checks far apart: the canary passed its first one and is found failing only by clients.
        health_interval_s=60,
    )
    if fault == "refused":
        canary.proc.send_signal(signal.SIGKILL)
        canary.proc.wait()
    answers = []
    for i in range(6):
        stream = fault == "silent_stream" or (fault != "silent" and i % 2 == 1)
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(stream), headers=CLOSE, timeout=30)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-release-stage"] == "stable"
        answers.append(_answer(resp))
    assert answers == [" tok0 tok1 tok2"] * 6  # 0 client errors: stable's whole answers
    counts = _stage_counts(gateway, scrape_token)
    assert counts[("stable", "ok")] == 6
    assert ("stable", "error") not in counts and ("canary", "ok") not in counts
    if fault == "refused":
        # Refused: the canary engine is out of rotation after a worker's first try of it.
        assert 1 <= counts[("canary", "error")] <= 2
    else:
        assert counts[("canary", "error")] == 6 and counts[("canary", "duration_count")] == 6
    if fault.startswith("silent"):
        # Each timed-out canary attempt's first byte is observed as the timeout itself.
        assert counts[("canary", "count")] == 6 and counts[("canary", "sum")] == pytest.approx(3.0)
        assert all(r["attempts"] == 2 for r in gateway.log_records())


def test_split_stickiness_header_override_and_bad_output(
    start_upstream: Any, start_gateway: Any, scrape_token: Any, tmp_path: Path
) -> None:
    stable, canary = start_upstream(), start_upstream()
    stages = tmp_path / "stages.json"
    _write_stages(stages, 30, sticky="session")
    gateway = _gateway(start_gateway, scrape_token, stable, canary, stages_file=str(stages),
                       session_header="X-Session")

    def stage(session: str | None = None, asked: str | None = None, **body: Any) -> str:
        headers = {**CLOSE, **({"X-Session": session} if session else {}),
                   **({"X-Release-Stage": asked} if asked else {})}
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=_chat(**body), headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.headers["x-release-stage"]

    # Sessions split by the weight, and each keeps its stage whichever worker serves it.
    first = {f"s{i}": stage(f"s{i}") for i in range(30)}
    assert set(first.values()) == {"stable", "canary"}
    assert {s: stage(s, stream=True) for s in first} == first
    # The override, whatever the weights; then no split at all: the canary only on request.
    assert stage(next(s for s, st in first.items() if st == "stable"), asked="canary") == "canary"
    stages.unlink()
    until(lambda: {stage(s) for s in first} == {"stable"}, timeout=10)
    assert stage(asked="canary") == "canary" and stage(asked="Stable") == "stable"
    before = _stage_counts(gateway, scrape_token)

    # bad_output: a 200 with nothing in it, or that did not finish as asked.
    stage(asked="canary", x_fake={"finish_reason": "abort"})
    stage(asked="canary", stream=True, x_fake={"chunks": 0})
    stage(asked="canary", stream=True, x_fake={"finish_reason": "abort"})
    stage(asked="canary", stream=True)
    stage(x_fake={"finish_reason": "stop"})
    after = _stage_counts(gateway, scrape_token)

    def added(key: tuple[str, str]) -> float:
        return after.get(key, 0) - before.get(key, 0)

    # Forced (the header named the stage): judged, but kept out of the release's figures.
    assert added(("forced:canary", "bad_output")) == 3 and added(("forced:canary", "ok")) == 1
    assert added(("canary", "bad_output")) == 0 and added(("canary", "ok")) == 0
    assert added(("stable", "ok")) == 1 and added(("stable", "bad_output")) == 0
    assert added(("canary", "error")) == 0 and added(("canary", "count")) == 0


def test_whole_canary_answers_have_their_own_deadline_and_failures_are_judged(
    start_upstream: Any, start_gateway: Any, scrape_token: Any, tmp_path: Path
) -> None:
    stable = start_upstream()
    canary = start_upstream("--chat-fake", json.dumps({"stall_s": 1.5}))  # whole answers take 1.5 s
    stages = tmp_path / "stages.json"
    _write_stages(stages, 100, answer_timeout_s=10)
    gateway = _gateway(start_gateway, scrape_token, stable, canary, stages_file=str(stages),
                       canary_first_byte_timeout_s=0.5, health_interval_s=60)

    def post(timeout: float = 30, **body: Any) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json=_chat(**body), headers=CLOSE, timeout=timeout)

    # A whole answer longer than the first-byte timeout is the canary's, within answer_timeout_s.
    resp = post()
    assert resp.status_code == 200 and resp.headers["x-release-stage"] == "canary", resp.text
    counts = _stage_counts(gateway, scrape_token)
    assert counts[("canary", "ok")] == 1 and ("canary", "error") not in counts
    # Past answer_timeout_s: retried on stable, an error of the canary at its elapsed time.
    _write_stages(stages, 100, answer_timeout_s=0.5)
    until(lambda: post().headers["x-release-stage"] == "stable", timeout=10)
    counts = _stage_counts(gateway, scrape_token)
    assert counts[("canary", "error")] >= 1 and counts[("canary", "ok")] == 1

    # An engine's 4xx is relayed and counted client_error; any 5xx relayed is an error.
    _write_stages(stages, 100, answer_timeout_s=10)
    until(lambda: post(x_fake={}).headers["x-release-stage"] == "canary", timeout=10)
    before = _stage_counts(gateway, scrape_token)
    assert post(x_fake={"status": 400}).status_code == 400
    assert post(x_fake={"status": 507}).status_code == 507
    # A client that leaves before the first byte: an error of the canary, TTFT when it left.
    with pytest.raises(httpx.TimeoutException):
        post(timeout=0.5)

    def added() -> dict[tuple[str, str], float]:
        after = _stage_counts(gateway, scrape_token)
        return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}

    until(lambda: added().get(("canary", "count")) == 3, timeout=10)
    grew = added()
    assert grew[("canary", "client_error")] == 1 and grew[("canary", "error")] == 2, grew
    assert ("canary", "ok") not in grew and ("stable", "ok") not in grew, grew
    assert 0.4 < grew[("canary", "sum")] < 1.5, grew  # the 4xx, the 5xx and the client's 0.5 s wait


def test_only_release_testers_steer_and_no_key_outweighs_the_others(
    start_upstream: Any, start_gateway: Any, scrape_token: Any, keys: Any, tmp_path: Path
) -> None:
    """Any key holder could send the stage header: 25 forced 4xx on a healthy canary rolled it
    back, 200 forced good answers advanced a failing one. Now the header is honoured for release
    testers only, forced attempts are counted apart, and one key's share of a window's evidence
    is capped."""
    stable, canary = start_upstream(), start_upstream()
    stages = tmp_path / "stages.json"
    _write_stages(stages, 0)  # everyone on stable: only the header reaches the canary
    user = keys.create("user")
    tester = keys.create("tester", release_tester=True)
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file), "metrics_token_file": str(scrape_token.file),
        "stages_file": str(stages),
        "release_evidence": {"window_s": 600, "per_key_floor": 5, "per_key_share": 0.25},
        "engines": [
            {"name": "s1", "url": stable.url, "model": "tiny"},
            {"name": "s1-canary", "url": canary.url, "model": "tiny", "stage": "canary"},
        ],
    })

    def ask(secret: str, stage: str | None = None, **body: Any) -> httpx.Response:
        headers = {**CLOSE, "Authorization": f"Bearer {secret}", **({"X-Release-Stage": stage} if stage else {})}
        return httpx.post(gateway.url + "/v1/chat/completions", json=_chat(**body), headers=headers, timeout=30)

    # A plain key's header is ignored: stable answers, and it counts as stable's evidence.
    refused = [ask(user, "canary", x_fake={"status": 400}) for _ in range(3)]
    assert {r.headers["x-release-stage"] for r in refused} == {"stable"}
    # A tester reaches the canary; its attempts are not the canary's figures.
    assert ask(tester, "canary").headers["x-release-stage"] == "canary"
    for _ in range(4):
        assert ask(tester, "canary", x_fake={"status": 400}).status_code == 400
    counts = _stage_counts(gateway, scrape_token)
    assert not [k for k in counts if k[0] == "canary"], counts
    assert counts[("forced:canary", "ok")] == 1 and counts[("forced:canary", "client_error")] == 4
    assert counts[("stable", "client_error")] == 3

    # One key's attempts past max(5, 25% of the window's) are left out of the evidence.
    other = keys.create("other")
    time.sleep(1.5)  # the gateway reloads its keys each second
    for _ in range(20):
        assert ask(user).status_code == 200
    for _ in range(4):
        assert ask(other).status_code == 200
    counts = _stage_counts(gateway, scrape_token)
    judged_user = 5  # 3 client errors above, then 2 more: the floor
    assert counts[("stable", "ok")] == judged_user - 3 + 4, counts
    assert counts[("key_share:stable", "ok")] == 20 - (judged_user - 3), counts
