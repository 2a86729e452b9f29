"""audit.retain at a real gateway (#38 item 3, docs/audit.md#keeping-prompts-and-answers): with it
on, the record holds the prompt redacted (an e-mail address and an `sk-pli-` key in it) and the
answer the client received, whole, streamed, and streamed across a mid-stream failover
(service/stream_resume.py); the chain verifies (and finds an answer changed), and neither the
access log, the gateway's output nor /metrics has the text. With it off, the record has neither,
and its fields are the usual ones."""

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from service import audit_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EMAIL = "alice.wong@example.com"
LEAKED_KEY = "sk-pli-Zx81mQ2pLk9Rt4VwYb7c"  # a key pasted into a prompt (not one of the gateway's)
PROMPT = f"Mail {EMAIL} about key {LEAKED_KEY} please"
REDACTED = "Mail [redacted:email] about key [redacted:api_key] please"
FIELDS = {"seq", "ts", "request_id", "subject", "tenant", "path", "model", "stage", "status",
          "prompt_tokens", "completion_tokens", "latency_ms", "client", "prev"}


def _records(folder: Path) -> list[dict[str, Any]]:
    time.sleep(0.5)  # written in batches every 0.2 s
    verdict = audit_chain.verify([(p.name, p.read_bytes()) for p in sorted(folder.glob("requests-*.jsonl"))])
    assert verdict.ok, verdict.problems
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.glob("requests-*.jsonl"))
    return verdict.records


def _chat(gateway: Any, secret: str, stream: bool, **extra: Any) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8,
            "stream": stream, **extra}
    headers = {"Authorization": f"Bearer {secret}"}
    url = gateway.url + "/v1/chat/completions"
    if not stream:
        resp = httpx.post(url, json=body, headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
        return str(resp.json()["choices"][0]["message"]["content"])
    text = []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", ()):
                    text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text)


def test_retained_prompts_are_redacted_and_answers_kept_whole_streamed_and_resumed(
    tmp_path: Path, start_upstream: Any, start_gateway: Any, keys: Any, scrape_token: Any
) -> None:
    secret = keys.create("app")
    engines = [start_upstream("--role-chunk") for _ in range(2)]
    folder = tmp_path / "audit"
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "metrics_token_file": str(scrape_token.file),
        "engines": [{"name": f"e{i}", "url": e.url, "model": "tiny"} for i, e in enumerate(engines)],
        "request_audit": {"dir": str(folder), "retention_days": 30, "retain": {
            "prompts": True, "answers": True, "redact": ["api_key", "email", "card", "ipv4"],
            "max_chars": 4096}},
        "workers": 1,
    })
    answers = [
        _chat(gateway, secret, stream=False),
        _chat(gateway, secret, stream=True),
        _chat(gateway, secret, stream=True, x_fake={"die_after": 3}),  # resumed on the other engine
    ]
    assert answers[0].startswith(" tok0 tok1") and answers[1] == answers[0] and answers[2] == answers[0], answers
    records = _records(folder)
    assert [r["status"] for r in records] == [200, 200, 200]
    for record, answer in zip(records, answers, strict=True):
        assert record["prompt"] == [{"role": "user", "content": REDACTED}], record
        assert record["answer"] == answer, record
        assert "prompt_cut" not in record and "answer_cut" not in record
    assert gateway.log_records()[-1]["resume"] == "resumed"  # the third one did fail over
    seen = json.dumps(records)
    assert EMAIL not in seen and LEAKED_KEY not in seen
    # The text goes to the trail only: not the access log, the gateway's output, or the metrics.
    metrics = httpx.get(gateway.url + "/metrics", headers=scrape_token.headers).text
    for where in (gateway.access_log.read_text(), gateway.output.read_text(), metrics):
        assert EMAIL not in where and LEAKED_KEY not in where and "tok1 tok2" not in where
    # The chain covers the texts as any field: an answer changed in the file is found.
    (day,) = folder.glob("requests-*.jsonl")
    day.write_bytes(day.read_bytes().replace(b'"answer":" tok0', b'"answer":" TOK0', 1))
    verdict = audit_chain.verify([(day.name, day.read_bytes())])
    assert [(p.line, p.kind) for p in verdict.problems] == [(1, "edited")], verdict.problems


def test_with_retention_off_the_record_has_neither_prompt_nor_answer(
    tmp_path: Path, start_upstream: Any, start_gateway: Any, keys: Any
) -> None:
    secret = keys.create("app")
    folder = tmp_path / "audit"
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "engines": [{"name": "e1", "url": start_upstream().url, "model": "tiny"}],
        "request_audit": {"dir": str(folder), "retention_days": 30},
        "workers": 1,
    })
    assert _chat(gateway, secret, stream=False).startswith(" tok0")
    assert _chat(gateway, secret, stream=True).startswith(" tok0")
    records = _records(folder)
    assert [set(r) for r in records] == [FIELDS, FIELDS], records
    seen = json.dumps(records)
    assert "Mail" not in seen and "tok0" not in seen
