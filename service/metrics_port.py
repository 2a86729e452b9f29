"""The separate metrics listener (settings `metrics_host`/`metrics_port`): the gateway's own
/metrics on an address of its own, in a thread of its own so scrapes never wait behind the
event loop. It asks for the scrape token like the API port does when one is configured (the
settings refuse an address other than loopback without one).

Over TLS like the API port when the gateway has a certificate (loaded once here: a renewal
reaches this port at the next restart; the API port reloads live).
"""

import socket
import ssl
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from service.config import TLSConfig
from service.errors import error_bytes
from service.scrape_auth import UNAUTHORIZED_CODE, UNAUTHORIZED_MESSAGE, ScrapeToken

# A connection that sends nothing (or stalls its TLS handshake) holds one thread this long.
_IDLE_S = 10


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a failed handshake or a dropped scraper: its connection closes, nothing to log


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(WSGIRequestHandler):
    timeout = _IDLE_S

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes are not API traffic: no line per scrape

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # in this connection's thread, under its timeout


def start(
    host: str, port: int, registry: CollectorRegistry, token: ScrapeToken | None, tls: TLSConfig | None
) -> WSGIServer:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if token is not None and not token.allows(environ.get("HTTP_AUTHORIZATION")):
            start_response(
                "401 Unauthorized",
                [
                    ("Content-Type", "application/json"),
                    ("WWW-Authenticate", "Bearer"),
                ],
            )
            return [error_bytes(UNAUTHORIZED_MESSAGE, "authentication_error", UNAUTHORIZED_CODE)]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    server = make_server(host, port, app, _Server6 if ":" in host else _Server, _Handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(tls.certfile, tls.keyfile)
        # The handshake happens in each connection's thread (_Handler.setup), not in accept():
        # one stalled client must not stop the others from being accepted.
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="metrics-port", daemon=True).start()
    return server
