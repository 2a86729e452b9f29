"""Bearer JWTs at the gateway beside API keys (#38): real RS256, ES256 and EdDSA tokens from keys
made here, checked against a JWKS file and against a JWKS served over HTTPS on loopback that
rotates its key mid-test. Every refusal is a 401 with OpenAI's error body; the gateway's log
says why, and never holds a token."""

import base64
import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from installer.flows.usage import rows
from service.jwt_auth import subject_name
from tests.support import idp
from tests.support.loopback import until
from tests.support.usage_report import usage_report

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _post(gateway: Any, bearer: str) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {bearer}"})


def _jwt_section(**source: Any) -> dict[str, Any]:
    return {"issuers": [idp.ISSUER], "audiences": [idp.AUDIENCE], "clock_skew_s": 5, **source}


def _hs256_with_public_key(key: idp.SigningKey) -> str:
    """The algorithm-confusion forgery: HMAC keyed with the public key's JWK, which anyone has."""
    b64 = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=").decode()  # noqa: E731
    signing_input = ".".join((
        b64(json.dumps({"alg": "HS256", "kid": key.kid}).encode()), b64(json.dumps(idp.claims()).encode())
    ))
    secret = json.dumps(key.public()).encode()
    return signing_input + "." + b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())


def _tampered(token: str) -> str:
    head, body, _sig = token.split(".")
    forged = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged["sub"] = "admin"
    return ".".join((head, base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode(), _sig))


def _assert_refused(gateway: Any, token: str, what: str) -> None:
    resp = _post(gateway, token)
    assert resp.status_code == 401, (what, resp.status_code, resp.text)
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_token"), what
    assert resp.headers["www-authenticate"] == "Bearer"


def test_jwks_file(tmp_path: Path, start_upstream: Any, start_gateway: Any, keys: Any) -> None:
    signers = [idp.make_key("RS256", "rsa-1"), idp.make_key("ES256", "ec-1"), idp.make_key("EdDSA", "ed-1")]
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps(idp.jwks(*signers)))
    api_key = keys.create("service-a")
    upstream = start_upstream()
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        "jwt": _jwt_section(jwks_file=str(jwks_file)),
    })

    for signer in signers:  # accepted: each algorithm
        resp = _post(gateway, signer.token())
        assert resp.status_code == 200, (signer.alg, resp.text)
    assert _post(gateway, api_key).status_code == 200  # API keys unchanged

    now = int(time.time())
    rsa, ec = signers[0], signers[1]
    stranger = idp.make_key("RS256", "rsa-1")  # same kid, another key: a bad signature
    refused = {
        "expired": rsa.token(iat=now - 600, exp=now - 60),
        "not yet valid": rsa.token(nbf=now + 600),
        "wrong audience": rsa.token(aud="someone-else"),
        "wrong issuer": rsa.token(iss="https://evil.example/"),
        "alg none": idp.unsigned({"alg": "none", "kid": "rsa-1"}, idp.claims()),
        "HS256 with the public key": _hs256_with_public_key(rsa),
        "bad signature": stranger.token(),
        "edited claims": _tampered(ec.token()),
        "unknown kid": idp.make_key("ES256", "ec-unknown").token(),
        "oversized": rsa.token(groups=["g" * 64] * 200),
        "no subject": rsa.token(sub=None),
        "no expiry": rsa.token(exp=None),
    }
    assert len(refused["oversized"]) > 8192
    for what, token in refused.items():
        _assert_refused(gateway, token, what)

    records = gateway.log_records()
    accepted = [r["key"] for r in records if r.get("status") == 200]
    assert accepted.count("service-a") == 1
    jwt_names = [name for name in accepted if name != "service-a"]
    assert len(jwt_names) == 3 and len(set(jwt_names)) == 1  # one subject, one name
    assert jwt_names[0].startswith("jwt/alice@example.internal.")

    output = gateway.output.read_text()
    for token in (*refused.values(), *(s.token() for s in signers)):
        signature = token.split(".")[2]
        assert token not in output and (not signature or signature not in output)
    for reason in ("ExpiredTokenError", "not yet valid", "'aud'", "'iss'", "alg 'none' is not allowed",
                   "alg 'HS256' is not allowed", "bad_signature", "unknown kid 'ec-unknown'", "above max_token_bytes"):
        assert reason in output, reason

    # A new key in the file is taken without a restart (the file is watched like keys.json).
    rotated = idp.make_key("ES256", "ec-2")
    jwks_file.write_text(json.dumps(idp.jwks(*signers, rotated)))
    until(lambda: _post(gateway, rotated.token()).status_code == 200)


def test_jwks_url_rotates(tmp_path: Path, start_upstream: Any, start_gateway: Any, keys: Any) -> None:
    old = idp.make_key("ES256", f"old-{uuid.uuid4().hex[:6]}")
    new = idp.make_key("RS256", f"new-{uuid.uuid4().hex[:6]}")
    upstream = start_upstream()
    with idp.serve_jwks(tmp_path, idp.jwks(old)) as server:
        gateway = start_gateway({
            "keys_file": str(keys.hosts_file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
            "jwt": _jwt_section(
                jwks_url=server.url, jwks_ca_file=str(server.ca_file),
                jwks_refresh_s=600, jwks_min_refresh_interval_s=2,
            ),
        })
        assert _post(gateway, old.token()).status_code == 200
        assert len(server.fetches) == 1

        # The IdP rotates: the new key's first token makes the gateway fetch the set at once.
        server.document = idp.jwks(new)
        time.sleep(2.1)  # past the refresh interval the first fetch started
        assert _post(gateway, new.token()).status_code == 200
        assert len(server.fetches) == 2
        _assert_refused(gateway, old.token(), "a token of the retired key")

        # Made-up kids cost at most one fetch per interval, however many arrive.
        before = len(server.fetches)
        for _ in range(20):
            _assert_refused(gateway, idp.make_key("EdDSA", uuid.uuid4().hex).token(), "unknown kid")
        assert len(server.fetches) - before <= 1

        # An IdP serving a set with no usable key (or an outage) keeps the keys the gateway has.
        server.document = {"keys": [{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}]}
        time.sleep(2.1)
        _assert_refused(gateway, idp.make_key("EdDSA", "other").token(), "unknown kid")
        assert _post(gateway, new.token()).status_code == 200
        assert "keeping the previous JWKS" in gateway.output.read_text()



def test_a_token_callers_usage_is_recorded_under_its_subject(
    tmp_path: Path, start_upstream: Any, start_gateway: Any, keys: Any, redis_url: str
) -> None:
    signer = idp.make_key("ES256", "ec-usage")
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps(idp.jwks(signer)))
    subject = f"batch-{uuid.uuid4().hex[:8]}@example.internal"
    upstream = start_upstream()
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        "limits": {"redis_url": redis_url},
        "jwt": _jwt_section(jwks_file=str(jwks_file)),
    })
    for _ in range(2):
        assert _post(gateway, signer.token(sub=subject)).status_code == 200
    name = subject_name(idp.ISSUER, subject)
    # `installer usage` reads the fields back as <kind>:<caller>:<model>: the caller's name is whole.
    [row] = [r for r in rows(usage_report(tmp_path / "gateway-0.yaml"), ("key", "model")) if r["key"] == name]
    assert (row["model"], row["requests"]) == ("tiny", 2) and row["completion_tokens"] > 0
