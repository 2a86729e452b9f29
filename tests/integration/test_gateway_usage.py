"""Usage accounting and token quotas with real gateways (uvicorn) and a real redis-server: the
recorded counts equal the responses' `usage` (streamed or not) per key and model, as the
control machine's report reads them (service.usage_report); a quota is one budget for two
gateways, refused with a 429 that names it and its reset, and neither a gateway restart nor a
restart of a Redis configured as the redis role configures it forgets them."""

import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from installer.flows.usage import rows
from installer.secrets import keys as installer_keys
from tests.support import REPO
from tests.support.loopback import free_port
from tests.support.redis_server import redis_server
from tests.support.usage_report import usage_report

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _name(prefix: str) -> str:
    # The session's one redis-server keeps every test's usage: names keep them apart.
    return f"{prefix}-{secrets.token_hex(3)}"


def _post(gateway: Any, secret: str, model: str, stream: bool, max_tokens: int) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "count the words in this prompt " * (1 + max_tokens % 3)}],
        "max_tokens": max_tokens,
        "stream": stream,
        # a streaming client that asks for usage sees what was counted
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }
    return httpx.post(
        gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )


def _usage_of(resp: httpx.Response) -> dict[str, int]:
    """The usage the client saw: the body's, or a stream's final usage event."""
    assert resp.status_code == 200, resp.text
    if resp.headers["content-type"].startswith("application/json"):
        return dict(resp.json()["usage"])
    events = [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")]
    return dict(next(e["usage"] for e in events if e.get("usage")))




def _config(keys: Any, redis_url: str, *upstreams: tuple[str, Any]) -> dict[str, Any]:
    return {
        "keys_file": str(keys.hosts_file),
        "limits": {"redis_url": redis_url},
        "engines": [{"name": f"e-{m}", "url": u.url, "model": m} for m, u in upstreams],
    }


def test_usage_equals_the_responses_usage_per_key_and_model(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    small, large = start_upstream(model="small"), start_upstream(model="large")
    alice, bob = _name("alice"), _name("bob")
    secrets_ = {alice: keys.create(alice), bob: keys.create(bob)}
    config = _config(keys, redis_url, ("small", small), ("large", large))
    first, second = start_gateway(config), start_gateway(config)
    expected: dict[tuple[str, str], list[int]] = {}
    plan = [(alice, "small", False), (alice, "small", True), (alice, "large", True),
            (bob, "small", True), (bob, "large", False), (bob, "large", False)]
    for n, (key, model, stream) in enumerate(plan):
        resp = _post((first, second)[n % 2], secrets_[key], model, stream, max_tokens=3 + n)
        usage = _usage_of(resp)
        seen = expected.setdefault((key, model), [0, 0, 0])
        seen[0] += 1
        seen[1] += usage["prompt_tokens"]
        seen[2] += usage["completion_tokens"]
    # a refused request (unknown model) and a wrong key are no usage
    assert _post(first, secrets_[alice], "nope", False, 3).status_code == 404
    assert _post(first, "sk-wrong", "small", False, 3).status_code == 401

    config_file = tmp_path / "gateway-0.yaml"  # start_gateway's own file for the first gateway
    got = {
        (r["key"], r["model"]): [r["requests"], r["prompt_tokens"], r["completion_tokens"]]
        for r in rows(usage_report(config_file), ("key", "model"))
        if r["key"] in (alice, bob)
    }
    assert got == expected
    assert all(v[2] > 0 and v[1] > 0 for v in got.values())


def test_a_stream_is_counted_when_its_client_did_not_ask_for_usage(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    upstream = start_upstream(model="tiny")
    streamed, whole = _name("streamed"), _name("whole")
    secrets_ = {streamed: keys.create(streamed), whole: keys.create(whole)}
    gateway = start_gateway(_config(keys, redis_url, ("tiny", upstream)))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5}

    def post(key: str, **extra: Any) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json={**body, **extra},
                          headers={"Authorization": f"Bearer {secrets_[key]}"}, timeout=30)

    resp = post(streamed, stream=True)
    assert resp.status_code == 200 and '"usage"' not in resp.text  # the gateway's own request for it
    usage = _usage_of(post(whole))  # the same answer, whole: its usage says what the stream used
    by_key = {r["key"]: r for r in rows(usage_report(tmp_path / "gateway-0.yaml"), ("key",))}
    for key in (streamed, whole):
        row = by_key[key]
        assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (
            1, usage["prompt_tokens"], usage["completion_tokens"])


def test_one_quota_for_two_gateways_refused_with_its_reset_and_kept_across_a_restart(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    upstream = start_upstream(model="tiny")
    name = _name("quota")
    secret = keys.create(name, quota_tokens=120, quota_period="day")
    config = _config(keys, redis_url, ("tiny", upstream))
    first, second = start_gateway(config), start_gateway(config)
    used = 0
    statuses = []
    for n in range(12):
        resp = _post((first, second)[n % 2], secret, "tiny", n % 3 == 0, max_tokens=8)
        statuses.append(resp.status_code)
        if resp.status_code == 200:
            usage = _usage_of(resp)
            used += usage["prompt_tokens"] + usage["completion_tokens"]
        else:
            break
    # admitted while the prompt and a token fit in what is left (both gateways charging one
    # counter, each completion capped to it), then refused: never beyond the quota
    assert statuses[-1] == 429 and set(statuses[:-1]) == {200}
    assert used <= 120 and len(statuses) >= 3
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    for gateway in (first, second):
        resp = _post(gateway, secret, "tiny", False, max_tokens=8)
        assert resp.status_code == 429
        error = resp.json()["error"]
        assert error["code"] == "quota_exceeded" and error["type"] == "insufficient_quota"
        assert f"key '{name}': 120 tokens per day" in error["message"]
        assert f"{used} used" in error["message"]
        assert f"resets at {tomorrow}" in error["message"]
        seconds_left = (datetime.fromisoformat(tomorrow) - datetime.now(UTC)).total_seconds()
        assert abs(int(resp.headers["Retry-After"]) - seconds_left) <= 5
    quota = {q["key"]: q for q in usage_report(tmp_path / "gateway-0.yaml").quotas}[name]
    assert quota == {"key": name, "quota_tokens": 120, "period": "day", "used": used, "resets": tomorrow}

    # A restarted gateway reads the same counters: still refused, and the usage is all there.
    first.proc.terminate()
    first.proc.wait(timeout=30)
    again = start_gateway(config)
    assert _post(again, secret, "tiny", False, max_tokens=8).status_code == 429
    [row] = [r for r in rows(usage_report(tmp_path / "gateway-0.yaml"), ("key",)) if r["key"] == name]
    assert row["prompt_tokens"] + row["completion_tokens"] == used

    # A larger quota (`installer keys quota`) reaches the gateways with the key file: admitted again.
    installer_keys.set_quota(name, 10_000, "day", path=keys.store)
    installer_keys.write_hosts_file(keys.hosts_file, installer_keys.load(keys.store))
    deadline = datetime.now(UTC) + timedelta(seconds=10)
    while _post(again, secret, "tiny", False, max_tokens=8).status_code != 200:
        assert datetime.now(UTC) < deadline, "the raised quota was not picked up"


def test_a_rate_limited_request_gives_its_quota_reservation_back(
    start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str, tmp_path: Path
) -> None:
    upstream = start_upstream(model="tiny")
    name = _name("both")
    secret = keys.create(name, rpm=1, quota_tokens=100_000, quota_period="month")
    gateway = start_gateway(_config(keys, redis_url, ("tiny", upstream)))
    usage = _usage_of(_post(gateway, secret, "tiny", False, max_tokens=4))
    assert _post(gateway, secret, "tiny", False, max_tokens=4).status_code == 429  # rpm
    quota = {q["key"]: q for q in usage_report(tmp_path / "gateway-0.yaml").quotas}[name]
    assert quota["used"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert quota["period"] == "month" and quota["resets"].endswith("-01T00:00:00Z")


def _role_persistence() -> list[str]:
    """The redis role's persistence settings (its config template), as redis-server options."""
    options = []
    for line in (REPO / "playbooks/roles/redis/templates/redis.conf.j2").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name in ("save", "appendonly", "appendfsync"):
            options += [f"--{name}", value.strip('"')]
    return options


def test_usage_and_quota_outlive_a_restart_of_the_roles_redis(
    start_upstream: Any, start_gateway: Any, keys: Any, tmp_path: Path
) -> None:
    options = _role_persistence()
    data, port = tmp_path / "redis", free_port()
    data.mkdir()
    upstream = start_upstream(model="tiny")
    name = _name("kept")
    secret = keys.create(name, quota_tokens=1000, quota_period="month")
    with redis_server(data, options, port) as url:
        gateway = start_gateway(_config(keys, url, ("tiny", upstream)))
        usage = _usage_of(_post(gateway, secret, "tiny", False, max_tokens=4))
    with redis_server(data, options, port):  # stopped and started again, as an upgrade does
        report = usage_report(tmp_path / "gateway-0.yaml")
    [row] = [r for r in rows(report, ("key",)) if r["key"] == name]
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (
        1, usage["prompt_tokens"], usage["completion_tokens"])
    assert report.quotas[0]["used"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_the_roles_redis_never_evicts_a_quota_counter_when_full(tmp_path: Path) -> None:
    """At maxmemory, the redis role's policy refuses writes rather than evicting: a quota counter
    (shorter-lived than the usage hashes) outlives the pressure."""
    import redis

    policy = next(
        line.split()[1] for line in (REPO / "playbooks/roles/redis/templates/redis.conf.j2").read_text().splitlines()
        if line.startswith("maxmemory-policy ")
    )
    data = tmp_path / "redis"
    data.mkdir()
    with redis_server(data, ["--save", "", "--appendonly", "no", "--maxmemory", "3mb",
                             "--maxmemory-policy", policy]) as url:
        client = redis.Redis.from_url(url)
        client.set("pli:quota:team:d2026-12-01", 5000, ex=2 * 86400)
        full = False
        for day in range(4000):  # usage hashes, kept 400 days, until Redis is full
            try:
                client.hset(f"pli:usage:{day}", mapping={f"p:k{i}:m": i for i in range(40)})
                client.expire(f"pli:usage:{day}", 400 * 86400)
            except redis.exceptions.OutOfMemoryError:
                full = True
                break
        assert full
        assert client.get("pli:quota:team:d2026-12-01") == b"5000"
        client.close()
