"""An engine's /metrics as vLLM serves it, on loopback (the fake engine, benchmarks/fake_upstream.py,
has none): what the gateway relays at /metrics/engines/<name>."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

METRICS = b'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="tiny"} 3.0\n'


class _Engine(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body, status = (METRICS, 200) if self.path == "/metrics" else (b"", 404)
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def metrics_engine() -> Iterator[str]:
    """The stand-in's base URL while it runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
