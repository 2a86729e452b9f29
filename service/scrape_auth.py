"""The scrape token: the bearer token Prometheus sends to read the gateway's metrics.

Metrics name every API key and count its traffic, so they are not public: /metrics and
/metrics/engines/* answer only a request that shows this token. It is a secret of its own, not
an API key (a client's key must not show it the other clients' names), generated on the control
machine (installer/metrics_token.py) and read from `metrics_token_file` once at start-up.
"""

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import Request

from service.errors import GatewayError

# What the installer generates is 64 hex characters; anything much shorter is guessable.
MIN_LENGTH = 32


class ScrapeToken:
    def __init__(self, path: Path) -> None:
        try:
            token = path.read_text().strip()
        except OSError as exc:  # start-up fails, loudly (service/__main__.py)
            raise ValueError(
                f"metrics_token_file {path}: {exc.strerror}; the installer writes it (gateway role), "
                "or leave metrics_token_file out to serve no metrics"
            ) from None
        if len(token) < MIN_LENGTH:
            raise ValueError(
                f"metrics_token_file {path} holds a token of {len(token)} characters; write one of at "
                f"least {MIN_LENGTH} (e.g. `openssl rand -hex 32 > {path}`)"
            )
        self._digest = hashlib.sha256(token.encode()).digest()

    def allows(self, authorization: str | None) -> bool:
        scheme, _, given = (authorization or "").partition(" ")
        # Digests of equal length, compared in constant time: timing tells nothing of the token.
        digest = hashlib.sha256(given.strip().encode()).digest()
        return hmac.compare_digest(digest, self._digest) and scheme.lower() == "bearer"


UNAUTHORIZED_MESSAGE = "Metrics need the scrape token: send 'Authorization: Bearer <token>'."
UNAUTHORIZED_CODE = "invalid_scrape_token"


def require(token: ScrapeToken) -> Callable[[Request], Awaitable[None]]:
    """The route dependency that refuses a request without the token (401, nothing else said)."""

    async def check(request: Request) -> None:
        if not token.allows(request.headers.get("authorization")):
            raise GatewayError(
                401,
                UNAUTHORIZED_MESSAGE,
                "authentication_error",
                UNAUTHORIZED_CODE,
                {"WWW-Authenticate": "Bearer"},
            )

    return check
