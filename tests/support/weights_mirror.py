"""An internal weights mirror for tests: a folder served over HTTPS on 127.0.0.1 by a
certificate of the installer's own CA code, answering Range requests and only a caller with
the bearer token; it records each request's path and Range header."""

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from installer.tls import ca


@dataclass
class Mirror:
    url: str
    ca_file: Path
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header or "")


@contextmanager
def serve_folder(folder: Path, certs: Path, token: str) -> Iterator[Mirror]:
    authority = ca.create_ca("mirror-test")
    issued = ca.issue_server(authority, "mirror", ["localhost"], ["127.0.0.1"], 2)
    ca_file, cert, key = certs / "mirror-ca.pem", certs / "mirror.pem", certs / "mirror.key"
    ca_file.write_bytes(authority.cert_pem)
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    key.chmod(0o600)
    state = Mirror("", ca_file)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("Range", "")))
            if self.headers.get("Authorization") != f"Bearer {token}":
                self.send_error(401)
                return
            path = (folder / self.path.removeprefix("/models/")).resolve()
            if not path.is_file() or folder.resolve() not in path.parents:
                self.send_error(404)
                return
            data = path.read_bytes()
            start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-")) if "Range" in self.headers else 0
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            self.wfile.write(data[start:])

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.url = f"https://127.0.0.1:{server.server_address[1]}/models/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
