"""A stand-in identity provider for tests: signing keys made here (cryptography, through
joserfc), their JWKS, tokens signed with them, forged tokens no library would sign, and a JWKS
served over HTTPS on 127.0.0.1 by a certificate of the installer's own CA code."""

import base64
import json
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey

from tests.support.https_server import serve_https

ISSUER = "https://idp.example.internal/realms/llm"
AUDIENCE = "private-llm"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    alg: str
    kid: str
    key: Key

    def public(self) -> dict[str, Any]:
        jwk = self.key.as_dict(private=False)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def token(self, header: dict[str, Any] | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice@example.internal", "iat": now, "exp": now + 300}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        with warnings.catch_warnings():  # joserfc's note that RFC 9864 prefers "Ed25519" to "EdDSA"
            warnings.simplefilter("ignore", SecurityWarning)
            protected = {"alg": self.alg, "kid": self.kid, **(header or {})}
            return jwt.encode(protected, body, self.key, algorithms=[self.alg])


def make_key(alg: str, kid: str) -> SigningKey:
    if alg == "RS256":
        return SigningKey(alg, kid, RSAKey.generate_key(2048))
    if alg == "ES256":
        return SigningKey(alg, kid, ECKey.generate_key("P-256"))
    if alg == "EdDSA":
        return SigningKey(alg, kid, OKPKey.generate_key("Ed25519"))
    raise ValueError(alg)


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [k.public() for k in keys]}


def unsigned(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    """A compact token put together by hand: `alg: none`, or a signature of our choosing."""
    return ".".join((_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode()), _b64(signature)))


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "iat": now, "exp": now + 300, **over}


@dataclass
class JWKSServer:
    url: str
    ca_file: Path
    document: dict[str, Any]
    fetches: list[float] = field(default_factory=list)


@contextmanager
def serve_jwks(root: Path, document: dict[str, Any]) -> Iterator[JWKSServer]:
    """https://127.0.0.1:<port>/jwks, serving `server.document` as it is at each request."""
    state = JWKSServer("", root / "idp-ca.pem", document)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/jwks":
                self.send_error(404)
                return
            state.fetches.append(time.monotonic())
            body = json.dumps(state.document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serve_https(Handler, root, "idp") as served:
        state.url, state.ca_file = f"{served.origin}/jwks", served.ca_file
        yield state
