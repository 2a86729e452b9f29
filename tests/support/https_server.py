"""A test's own HTTPS server on 127.0.0.1: http.server's threading server behind TLS, with a
certificate issued by the installer's own CA code (installer/tls/ca.py), so a client under test
checks it against a CA file as it would a real identity provider's or mirror's."""

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from installer.tls import ca


@dataclass(frozen=True)
class Served:
    origin: str  # https://127.0.0.1:<port>
    ca_file: Path  # the CA that issued its certificate, for the client's verify


@contextmanager
def serve_https(handler: type[BaseHTTPRequestHandler], certs: Path, name: str) -> Iterator[Served]:
    """`handler` served over TLS until the block ends; the CA, certificate and key are written
    to `certs` as <name>-ca.pem, <name>.pem and <name>.key (0600)."""
    authority = ca.create_ca(f"{name}-test")
    issued = ca.issue_server(authority, name, ["localhost"], ["127.0.0.1"], 2)
    ca_file, cert, key = certs / f"{name}-ca.pem", certs / f"{name}.pem", certs / f"{name}.key"
    ca_file.write_bytes(authority.cert_pem)
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    key.chmod(0o600)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(f"https://127.0.0.1:{server.server_address[1]}", ca_file)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
