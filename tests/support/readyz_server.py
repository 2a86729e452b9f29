"""A gateway's stand-in for the keepalived test, run inside a network namespace: HTTPS on every
address of the namespace (its own and the VIP once it holds it), `/readyz` 200 while the file
UNREADY does not exist (503 once it does, as a draining gateway answers), and `/who` naming the
host, so a client of the VIP sees which host answered.

Usage: readyz_server.py NAME PORT CERT KEY UNREADY_FILE"""

import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    name, port, cert, key, unready = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/readyz":
                code = 503 if unready.exists() else 200
                body = b'{"status": "draining"}' if code == 503 else b'{"status": "ready"}'
            elif self.path == "/who":
                code, body = 200, name.encode()
            else:
                code, body = 404, b"{}"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    # A client cut off mid-handshake when the VIP moves never sends another byte: the handshake
    # runs in the request's own thread (not in accept(), which would block every later request,
    # keepalived's check included) and every read has a deadline, as the real gateway's have.
    Handler.timeout = 5
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
