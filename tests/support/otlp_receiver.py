"""A real OTLP/HTTP trace receiver on 127.0.0.1, built on opentelemetry-proto.

The OpenTelemetry Collector is a Go binary that no package source this machine reaches carries
(PyPI, Debian, npm), so the tests receive spans with this instead: POST /v1/traces with an
ExportTraceServiceRequest in protobuf (gzip or not), decoded with the protocol's own generated
classes and answered with an ExportTraceServiceResponse, as the Collector's otlphttp receiver does.
It keeps every request's bytes as they arrived (decompressed) and the spans decoded from them.

    with otlp_receiver() as receiver:
        ... receiver.url ...  # the base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
        spans = receiver.wait_spans(1)
"""

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # 32 hex digits, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    kind: int
    status_code: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in items}


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    found = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                found.append(ReceivedSpan(
                    s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name, s.kind,
                    s.status.code, _attributes(s.attributes), resource,
                ))
    return found


@dataclass
class Receiver:
    url: str
    bodies: list[bytes] = field(default_factory=list)  # every export, decompressed
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_spans(self, count: int, timeout: float = 15.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            time.sleep(0.05)
        raise AssertionError(f"the receiver got {len(self.spans)} span(s) in {timeout} s, not {count}")

    def raw(self) -> bytes:
        with self.lock:
            return b"".join(self.bodies)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name for it
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != PROTOBUF:
                self.send_error(404 if self.path != "/v1/traces" else 415)
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            try:
                spans = decode(body)
            except Exception:  # protobuf's DecodeError and friends: a bad request
                self.send_error(400)
                return
            with receiver.lock:
                receiver.bodies.append(body)
                receiver.spans.extend(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", PROTOBUF)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(receiver)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
