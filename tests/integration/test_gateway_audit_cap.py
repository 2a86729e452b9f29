"""The request audit's daily cap at a real gateway (#38, docs/audit.md#size): past it, refusals
are counted (the metric the alert reads, and a chained count record written when the gateway
stops), answered requests are still recorded one by one, and the chain verifies."""

import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from service import audit_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}


def test_past_the_cap_refusals_are_counted_and_answers_recorded(
    tmp_path: Path, start_upstream: Any, start_gateway: Any, keys: Any, scrape_token: Any
) -> None:
    key = keys.create("capped")
    folder = tmp_path / "audit"
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "engines": [{"name": "e1", "url": start_upstream().url, "model": "tiny"}],
        "metrics_token_file": str(scrape_token.file),
        "request_audit": {"dir": str(folder), "retention_days": 30, "max_bytes_per_day": 1},
        "workers": 1,
    })

    def post(bearer: str) -> int:
        url = gateway.url + "/v1/chat/completions"
        return httpx.post(url, json=CHAT, headers={"Authorization": f"Bearer {bearer}"}).status_code

    assert post("sk-pli-wrong") == 401  # today's file is empty: a record
    time.sleep(0.5)  # written (batches go out every 0.2 s): the file is past its 1-byte cap
    assert [post("sk-pli-wrong") for _ in range(5)] == [401] * 5
    assert post(key) == 200
    time.sleep(0.5)
    metrics = httpx.get(gateway.url + "/metrics", headers=scrape_token.headers).text
    assert "pli_gateway_request_audit_unrecorded_total 5.0" in metrics, metrics[-2000:]

    gateway.proc.send_signal(signal.SIGTERM)  # the held count is written as the gateway stops
    gateway.proc.wait(timeout=30)
    verdict = audit_chain.verify([(p.name, p.read_bytes()) for p in sorted(folder.glob("requests-*.jsonl"))])
    assert verdict.ok, verdict.problems
    kinds = [(r.get("status"), r.get("event"), r.get("count")) for r in verdict.records]
    assert kinds == [(401, None, None), (200, None, None), (None, audit_chain.NOT_RECORDED, 5)], kinds
    assert json.dumps(verdict.records).count("hello") == 0
