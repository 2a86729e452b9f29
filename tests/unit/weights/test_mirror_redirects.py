"""The mirror fetch's redirects (installer/weights/verify.py): urllib alone would send the bearer
token to wherever a redirect points, plain http included."""

import io
import ssl
import urllib.error
import urllib.request
from email.message import Message

import pytest

from installer.weights import verify


def _redirect(to: str) -> urllib.request.Request | None:
    opener = verify._mirror_opener(ssl.create_default_context())
    handler = next(h for h in opener.handlers if isinstance(h, urllib.request.HTTPRedirectHandler))
    req = urllib.request.Request("https://mirror.internal:8443/models/a.bin",
                                 headers={"Authorization": "Bearer s3cret", "Range": "bytes=10-"})
    return handler.redirect_request(req, io.BytesIO(), 302, "Found", Message(), to)


def test_a_redirect_on_the_same_host_keeps_the_token() -> None:
    new = _redirect("https://mirror.internal:8443/store/a.bin")
    assert new is not None and new.get_header("Authorization") == "Bearer s3cret"


def test_a_redirect_to_another_host_goes_without_the_token() -> None:
    new = _redirect("https://bucket.s3.internal/a.bin?X-Amz-Signature=abc")
    assert new is not None and new.get_header("Authorization") is None
    assert new.full_url.startswith("https://bucket.s3.internal/")


def test_a_redirect_off_tls_is_refused() -> None:
    with pytest.raises(urllib.error.HTTPError, match="redirects off TLS"):
        _redirect("http://mirror.internal/a.bin")
