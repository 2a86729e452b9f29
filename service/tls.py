"""TLS for the gateway: the HTTPS it serves, the engines it reaches, and certificate reloads.

`load_server_certs` is the one place the gateway's certificate is loaded, at start and on
every renewal: loading into the live SSLContext makes new handshakes use the new certificate
while connections already open keep theirs, so a renewal needs no restart and drops nothing.
"""

import asyncio
import datetime as dt
import logging
import ssl
from pathlib import Path

from cryptography import x509
from prometheus_client import Gauge

from service.config import TLSConfig

log = logging.getLogger("service.tls")

# Forward-secret AEAD suites only, for TLS 1.2 clients; TLS 1.3's suites are all modern and
# OpenSSL negotiates 1.3 first whenever the client has it.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def _harden(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    return ctx


def cert_expiry(certfile: Path) -> float:
    """The certificate's notAfter as a Unix timestamp."""
    cert = x509.load_pem_x509_certificate(certfile.read_bytes())
    return cert.not_valid_after_utc.timestamp()


def load_server_certs(ctx: ssl.SSLContext, tls: TLSConfig, expiry: Gauge | None = None) -> float:
    """(Re)load the certificate and key into ctx; returns and exports the expiry time."""
    ctx.load_cert_chain(tls.certfile, tls.keyfile)
    expires = cert_expiry(tls.certfile)
    if expiry is not None:
        expiry.set(expires)
    return expires


def server_context(tls: TLSConfig, expiry: Gauge | None = None) -> ssl.SSLContext:
    ctx = _harden(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    load_server_certs(ctx, tls, expiry)
    return ctx


def client_context(tls: TLSConfig) -> ssl.SSLContext:
    """For https:// engines: verify them against the deployment CA (name and address checked)
    and present this host's certificate, which engines on other hosts require."""
    ctx = _harden(ssl.create_default_context(cafile=str(tls.ca_file)))
    ctx.load_cert_chain(tls.certfile, tls.keyfile)
    return ctx


def _stamp(tls: TLSConfig) -> tuple[float, ...]:
    try:
        return tuple(p.stat().st_mtime_ns for p in (tls.certfile, tls.keyfile, tls.ca_file))
    except OSError:
        return ()


async def watch(
    tls: TLSConfig,
    server: ssl.SSLContext | None,
    client: ssl.SSLContext | None,
    expiry: Gauge,
    interval_s: float,
) -> None:
    """Reload the certificate (and CA) into the live contexts when the files change.

    A half-written pair (new certificate, old key) fails to load and is retried on the next
    tick, so the files may be replaced one after the other.
    """
    seen = _stamp(tls)
    while True:
        await asyncio.sleep(interval_s)
        now = _stamp(tls)
        if now == seen or not now:
            continue
        try:
            if server is not None:
                load_server_certs(server, tls, expiry)
            if client is not None:
                client.load_verify_locations(cafile=str(tls.ca_file))
                client.load_cert_chain(tls.certfile, tls.keyfile)
        except (ssl.SSLError, OSError, ValueError) as exc:
            log.warning("certificate change not loaded yet (%s); retrying", exc)
            continue
        seen = now
        left = (cert_expiry(tls.certfile) - dt.datetime.now(dt.UTC).timestamp()) / 86400
        log.info("reloaded TLS certificate %s (expires in %.1f days)", tls.certfile, left)
