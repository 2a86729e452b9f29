"""An internal weights mirror for tests: a folder served over HTTPS on 127.0.0.1 by a
certificate of the installer's own CA code, answering Range requests and only a caller with
the bearer token; it records each request's path and Range header."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.support.https_server import serve_https


@dataclass
class Mirror:
    url: str
    ca_file: Path
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header or "")


@contextmanager
def serve_folder(folder: Path, certs: Path, token: str) -> Iterator[Mirror]:
    state = Mirror("", certs / "mirror-ca.pem")

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

    with serve_https(Handler, certs, "mirror") as served:
        state.url, state.ca_file = f"{served.origin}/models/", served.ca_file
        yield state
