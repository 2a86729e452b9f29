"""A bearer JWT's caller name (#38 item 1): bounded, safe as a Redis key and a metric label, never
an API key's name, and read back whole from usage's Redis fields; refusals logged at a bounded rate."""

import pytest

from service.jwt_auth import looks_like_jwt, subject_name
from service.keyfile import KEY_NAME_PATTERN
from service.usage import usage_field


def test_the_name_is_bounded_plain_and_distinct_per_issuer() -> None:
    issuer = "https://idp.example.internal/realms/llm"
    hostile = "Alice:Smith\n\x00" + "é" * 200 + "{}*?[]"
    name = subject_name(issuer, hostile)
    assert len(name) <= 64 and name.startswith("jwt/alice_smith.")
    assert all(c.isascii() and (c.isalnum() or c in "_.@-/") for c in name)
    assert ":" not in name and "\n" not in name
    assert subject_name(issuer, "alice") != subject_name("https://other.example/", "alice")
    assert subject_name(issuer, "alice") == subject_name(issuer, "alice")
    assert subject_name(issuer, "___").startswith("jwt/") and len(subject_name(issuer, "___")) == 16


def test_the_name_is_no_api_key_name_and_survives_usage_fields() -> None:
    import re

    name = subject_name("https://idp/", "svc-batch@example.internal")
    assert not re.fullmatch(KEY_NAME_PATTERN, name)
    kind, key, model = usage_field("p", name, "org/model:v2").split(":", 2)  # as installer/flows/usage.py reads it
    assert (kind, key, model) == ("p", name, "org/model:v2")


def test_what_looks_like_a_jwt() -> None:
    assert looks_like_jwt("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln")
    assert looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.")  # alg none: checked, and refused
    assert not looks_like_jwt("sk-pli-0123456789abcdef")
    assert not looks_like_jwt("a.b.c.d") and not looks_like_jwt("a b.c.d") and not looks_like_jwt("a.b=.c")


def test_refusals_are_logged_at_most_so_many_a_second(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from service import jwt_auth

    clock = [100.0]
    monkeypatch.setattr(jwt_auth.time, "monotonic", lambda: clock[0])
    refusals = jwt_auth.RefusalLog(per_second=3)
    with caplog.at_level("WARNING", logger="service.jwt_auth"):
        for _ in range(5):
            refusals.refused("unknown kid 'x'")
        clock[0] += 1
        refusals.refused("ExpiredTokenError: The token is expired")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused a bearer JWT: unknown kid 'x'"] * 3 + [
        "refused a bearer JWT: ExpiredTokenError: The token is expired (2 more refused, not logged)"]
