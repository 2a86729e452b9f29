"""API keys at the gateway: 401 with OpenAI's body for a missing, wrong, revoked or expired key;
key changes are picked up without a restart; a key limited to some models sees only those."""

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _post(gateway: Any, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=headers)


def _wait_status(gateway: Any, key: str, status: int) -> None:
    deadline = time.monotonic() + 5  # the key file is checked once a second
    while _post(gateway, key).status_code != status:
        assert time.monotonic() < deadline, f"key never answered {status}"
        time.sleep(0.1)


def test_keys(start_upstream: Any, start_gateway: Any, keys: Any) -> None:
    upstream = start_upstream()
    good = keys.create("good")
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )

    assert _post(gateway, good).status_code == 200
    for key, code in ((None, "missing_api_key"), ("sk-pli-wrong", "invalid_api_key")):
        resp = _post(gateway, key)
        assert resp.status_code == 401
        assert resp.json()["error"]["code"] == code
        assert resp.json()["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-pli-wrong").models.list()

    # Created and revoked while the gateway runs: no restart.
    later = keys.create("later", models=["other-model"])
    _wait_status(gateway, later, 404)  # known key, but this model is not one it may use
    assert (
        httpx.get(gateway.url + "/v1/models", headers={"Authorization": f"Bearer {later}"}).json()[
            "data"
        ]
        == []
    )
    keys.revoke("good")
    _wait_status(gateway, good, 401)

    # A bad file (half-written by hand) does not replace the keys in use.
    keys.hosts_file.write_text("{not json")
    time.sleep(1.5)
    assert _post(gateway, later).status_code == 404


def test_expired_key(start_upstream: Any, start_gateway: Any, tmp_path: Any) -> None:
    from service.keyfile import HostKey, HostKeyFile, hash_secret

    upstream = start_upstream()
    path = tmp_path / "hosts.json"
    old = HostKey(
        name="old", sha256=hash_secret("sk-old"), expires=datetime.now(UTC) - timedelta(days=1)
    )
    path.write_text(HostKeyFile(keys=[old]).model_dump_json())
    gateway = start_gateway(
        {"keys_file": str(path), "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}]}
    )
    resp = _post(gateway, "sk-old")
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "expired_api_key"

    # A key that expires while the gateway runs, with no change to the file.
    soon = datetime.now(UTC) + timedelta(seconds=3)
    path.write_text(
        HostKeyFile(
            keys=[old, HostKey(name="soon", sha256=hash_secret("sk-soon"), expires=soon)]
        ).model_dump_json()
    )
    _wait_status(gateway, "sk-soon", 200)
    time.sleep(max(0.0, (soon - datetime.now(UTC)).total_seconds()) + 0.1)
    assert _post(gateway, "sk-soon").status_code == 401


def test_secrets_never_reach_logs(start_upstream: Any, start_gateway: Any, keys: Any) -> None:
    upstream = start_upstream()
    secret = keys.create("app")
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    marker = "PROMPT-TEXT-MARKER"
    body = {**CHAT, "messages": [{"role": "user", "content": marker}]}
    assert (
        httpx.post(
            gateway.url + "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {secret}"},
        ).status_code
        == 200
    )
    _post(gateway, "sk-pli-wrong")
    records = gateway.log_records()
    assert [(r["key"], r["status"]) for r in records] == [("app", 200), ("-", 401)]
    assert records[0]["prompt_tokens"] and records[0]["completion_tokens"] == 2
    everything = (
        gateway.access_log.read_text() + gateway.output.read_text() + keys.hosts_file.read_text()
    )
    assert marker not in everything
    assert secret not in everything and secret not in keys.store.read_text()
    assert json.loads(keys.hosts_file.read_text())["keys"][0]["name"] == "app"


def test_prompts_logged_only_when_asked(start_upstream: Any, start_gateway: Any) -> None:
    upstream = start_upstream()
    gateway = start_gateway(
        {
            "allow_anonymous": True,
            "log_prompts": True,
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    body = {**CHAT, "messages": [{"role": "user", "content": "DEBUG-PROMPT"}]}
    assert httpx.post(gateway.url + "/v1/chat/completions", json=body).status_code == 200
    assert gateway.log_records()[0]["prompt"] == [{"role": "user", "content": "DEBUG-PROMPT"}]
