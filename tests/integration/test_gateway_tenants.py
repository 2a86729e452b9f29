"""Tenants and the request audit trail at two real gateways sharing one real Redis (#38 items 2
and 3): two tenants' limits hold separately, across both gateways, for their token callers and
an API key alike; a token naming no tenant is refused; usage is reported per tenant and caller;
the metrics name tenants, not subjects; each gateway's audit records verify, and an edit is found."""

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from installer.flows.usage import rows
from service import audit_chain
from service.jwt_auth import subject_name
from tests.support import idp
from tests.support.usage_report import usage_report

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "a secret prompt"}], "max_tokens": 2}


def _post(gateway: Any, bearer: str) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {bearer}"})


def _files(folder: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(folder.glob("requests-*.jsonl"))]


def test_two_tenants_through_two_gateways(
    tmp_path: Path,
    start_upstream: Any,
    start_gateway: Any,
    keys: Any,
    redis_url: str,
    scrape_token: Any,
) -> None:
    run = uuid.uuid4().hex[:6]  # the session's Redis outlives this test: buckets of its own
    research, support = f"research-{run}", f"support-{run}"
    signer = idp.make_key("ES256", "ec-1")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks(signer)))
    api_key = keys.create(f"ci-{run}")
    free_key = keys.create(f"free-{run}")  # in no tenant, no limits
    upstream = start_upstream()
    gateways = [
        start_gateway(
            {
                "keys_file": str(keys.hosts_file),
                "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
                "limits": {"redis_url": redis_url},
                "metrics_token_file": str(scrape_token.file),
                "jwt": {"issuers": [idp.ISSUER], "audiences": [idp.AUDIENCE], "jwks_file": str(jwks)},
                "tenants": {
                    "claim": "groups",
                    "tenants": [
                        {"name": research, "rpm": 3, "claim_values": ["ml"]},
                        {"name": support, "rpm": 3, "keys": [f"ci-{run}"]},
                    ],
                },
                "request_audit": {"dir": str(tmp_path / f"audit-{n}"), "retention_days": 30},
                # the first gateway's two workers share one chain (service/request_audit.py's flock)
                "workers": 2 - n,
            }
        )
        for n in range(2)
    ]
    a, b = gateways
    alice = signer.token(sub="alice", groups=["staff", "ml"])
    bob = signer.token(sub="bob", groups=["ml"])
    carol = signer.token(sub="carol", groups=[support])

    # research: 3 a minute between alice and bob, over both gateways
    assert [_post(g, t).status_code for g, t in ((a, alice), (b, alice), (b, bob))] == [200, 200, 200]
    refused = _post(a, bob)
    assert refused.status_code == 429 and f"tenant '{research}'" in refused.json()["error"]["message"]
    # support's limit is its own: its API key and carol share it, research's spent bucket does not count
    assert [_post(g, t).status_code for g, t in ((a, api_key), (b, carol), (a, carol))] == [200, 200, 200]
    assert _post(b, api_key).status_code == 429
    # a token naming no tenant, with no default tenant: refused
    stranger = _post(a, signer.token(sub="dave", groups=["staff"]))
    assert stranger.status_code == 403 and stranger.json()["error"]["code"] == "no_tenant"

    # usage per tenant and per caller (what `installer usage --by tenant,key` shows)
    report = usage_report(tmp_path / "gateway-0.yaml")
    got = {
        (r["tenant"], r["key"]): r["requests"]
        for r in rows(report, ("tenant", "key"))
        if r["tenant"] in (research, support)
    }
    assert got == {
        (research, subject_name(idp.ISSUER, "alice")): 2,
        (research, subject_name(idp.ISSUER, "bob")): 1,
        (support, f"ci-{run}"): 1,
        (support, subject_name(idp.ISSUER, "carol")): 2,
    }

    # the metrics' key label is the tenant for token callers, never the subject
    metrics = httpx.get(a.url + "/metrics", headers=scrape_token.headers).text
    assert f'key="tenant/{research}"' in metrics and "alice" not in metrics
    assert f'key="ci-{run}"' in metrics

    # a burst on fresh connections reaches both workers of the first gateway
    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=a.url, timeout=30) as client:
            headers = {"Authorization": f"Bearer {free_key}", "Connection": "close"}
            answers = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=CHAT, headers=headers) for _ in range(40))
            )
        return [answer.status_code for answer in answers]

    assert asyncio.run(burst()) == [200] * 40
    assert len({r["pid"] for r in a.log_records()}) == 2

    # each gateway's audit trail: every request, chained, without the prompt
    time.sleep(0.5)  # records are flushed every 0.2 s
    records: list[dict[str, Any]] = []
    for n in range(2):
        verdict = audit_chain.verify(_files(tmp_path / f"audit-{n}"))
        assert verdict.ok, verdict.problems
        assert [r["seq"] for r in verdict.records] == list(range(1, len(verdict.records) + 1))
        records += verdict.records
    assert sum(r["subject"] == f"free-{run}" for r in records) == 40
    records = [r for r in records if r["subject"] != f"free-{run}"]
    assert sorted((str(r["tenant"]), r["status"]) for r in records) == sorted(
        [(research, 200)] * 3 + [(research, 429)] + [(support, 200)] * 3 + [(support, 429)] + [("None", 403)]
    )
    mine = [r for r in records if r["subject"] == subject_name(idp.ISSUER, "alice")]
    assert len(mine) == 2 and all(r["model"] == "tiny" and r["client"] == "127.0.0.1" for r in mine)
    assert all(r["prompt_tokens"] and r["completion_tokens"] == 2 and r["latency_ms"] > 0 for r in mine)
    assert all(r["stage"] == "stable" for r in records if r["status"] == 200)
    for n in range(2):
        text = "".join(p.read_text() for p in (tmp_path / f"audit-{n}").glob("requests-*.jsonl"))
        assert "a secret prompt" not in text

    # an edited record is found at its line
    path = next((tmp_path / "audit-0").glob("requests-*.jsonl"))
    lines = path.read_bytes().splitlines()
    lines[0] = lines[0].replace(b'"status":200', b'"status":201')
    path.write_bytes(b"\n".join(lines) + b"\n")
    problems = audit_chain.verify(_files(tmp_path / "audit-0")).problems
    assert [(p.line, p.kind) for p in problems] == [(1, "edited")]
