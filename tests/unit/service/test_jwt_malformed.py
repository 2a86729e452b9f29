"""Hostile token shapes and odd JWKS keys end as refusals (Invalid: a 401), never as an
exception the gateway would answer with a 500."""

import asyncio
import base64
import json
import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from joserfc.jwk import ECKey

from service.config import JWTConfig
from service.jwt_auth import Invalid, KeySource, Verifier


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwks(tmp_path: Path, *extra: dict[str, object]) -> JWTConfig:
    key = ECKey.import_key(ec.generate_private_key(ec.SECP256R1()).public_key())  # type: ignore[arg-type]
    good = {**key.as_dict(private=False), "kid": "k1", "use": "sig", "alg": "ES256"}
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [good, *extra]}))
    return JWTConfig(issuers=["https://idp"], audiences=["llm"], jwks_file=path)


@pytest.mark.parametrize("header", [b'"alg"', b'["alg"]', b'{"alg": "ES256", "kid": "k1", "b64": "x"}', b"7"])
def test_a_header_that_is_no_object_is_refused(tmp_path: Path, header: bytes) -> None:
    verifier = Verifier(_jwks(tmp_path))
    token = f"{_b64(header)}.{_b64(b'{}')}.{_b64(b'sig')}"
    with pytest.raises(Invalid):
        asyncio.run(verifier.verify(token))


def test_a_payload_that_is_not_json_is_refused(tmp_path: Path) -> None:
    verifier = Verifier(_jwks(tmp_path))
    header = _b64(json.dumps({"alg": "ES256", "kid": "k1"}).encode())
    token = f"{header}.{_b64(b'not json')}.{_b64(b'sig')}"
    with pytest.raises(Invalid):
        asyncio.run(verifier.verify(token))


def test_a_key_joserfc_refuses_is_left_out_not_the_set(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    odd = {"kty": "EC", "crv": "P-256", "kid": "odd", "use": "sig", "alg": "ES256", "key_ops": ["verify", "encrypt"],
           "x": _b64(b"\x01" * 32), "y": _b64(b"\x02" * 32)}
    with caplog.at_level(logging.WARNING, logger="service.jwt_auth"):
        source = KeySource(_jwks(tmp_path, odd))
    assert "k1" in source.keys and "odd" not in source.keys
    assert "left out odd" in caplog.text
