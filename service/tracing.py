"""Traces: one span per relayed request, exported over OTLP/HTTP to the collector the settings name.

A client's W3C `traceparent` (and `tracestate`) is the span's parent, and the engine request
carries the span's own context, so vLLM's spans (`--otlp-traces-endpoint`) hang under it. The
span records the model, the stage that answered, the key's name (its public id: never the key or
its hash) and the engine's token counts; never a header, a prompt or an answer.

Tracing off (`tracing` unset) loads no OpenTelemetry SDK and creates no provider: the proxy then
only passes the client's trace headers through unchanged (service/proxy.py), so an engine sees
the client's trace id either way. The provider is never made OpenTelemetry's global one: FastAPI's
own telemetry (recent FastAPI, which imports opentelemetry-api) switches itself on only for a
global provider, so it stays off and no request gets a second span.

Spans are queued to a BatchSpanProcessor: ending one appends it to a bounded queue (full: the
span is dropped, never waited for) and a thread of the SDK exports batches, so a slow or absent
collector never delays a request.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.config import TracingConfig

TRACE_HEADERS = (b"traceparent", b"tracestate")
TRACES_PATH = "/v1/traces"  # OTLP/HTTP's signal path under the collector's base URL

# Attribute names: OpenTelemetry's GenAI conventions where they have one, ours under `pli.`.
MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
STAGE = "pli.release.stage"
KEY_ID = "pli.key.id"
ENGINE = "pli.engine"
ATTEMPTS = "pli.attempts"
STATUS = "http.response.status_code"
ERROR = "pli.error"


def traces_url(endpoint: str) -> str:
    """The collector's base URL (as OTEL_EXPORTER_OTLP_ENDPOINT) -> where traces are posted."""
    return endpoint.rstrip("/") + TRACES_PATH


class RequestTracer:
    """The SDK pieces of one gateway process (each worker builds its own after the fork)."""

    def __init__(self, config: TracingConfig) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace import SpanKind, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = Resource.create(
            {"service.name": config.service_name, "host.name": socket.gethostname(), "process.pid": os.getpid()}
        )
        # A client's sampled flag is followed; a request without one is sampled at the ratio.
        self.provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
        exporter = OTLPSpanExporter(endpoint=traces_url(config.otlp_endpoint), timeout=config.export_timeout_s)
        self.provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                max_queue_size=config.max_queue_size,
                schedule_delay_millis=config.schedule_delay_s * 1000,
                max_export_batch_size=min(512, config.max_queue_size),
                export_timeout_millis=config.export_timeout_s * 1000,
            )
        )
        self.tracer = self.provider.get_tracer("service.proxy")
        self.propagator = TraceContextTextMapPropagator()
        self._server, self._error, self._in_context = SpanKind.SERVER, StatusCode.ERROR, set_span_in_context

    def start(self, path: str, carrier: dict[str, str], started: float) -> tuple[Any, dict[str, str]]:
        """A span for the request that began at perf_counter() `started`, child of the client's
        context in `carrier` (if any), and the headers that carry the span's context onward."""
        parent = self.propagator.extract(carrier) if carrier else None
        ago_ns = int((time.perf_counter() - started) * 1e9)
        span = self.tracer.start_span(
            "POST " + path, context=parent, kind=self._server, start_time=time.time_ns() - ago_ns
        )
        onward: dict[str, str] = {}
        self.propagator.inject(onward, context=self._in_context(span))
        return span, onward

    def finish(
        self, span: Any, *, model: str, stage: str | None, key_id: str, engine: str | None, attempts: int,
        status: int | None, error: str | None, prompt_tokens: int | None, completion_tokens: int | None,
    ) -> None:
        """End the span with what the request came to; `key_id` is the key's name, its public id."""
        if span.is_recording():
            attributes = {
                MODEL: model, STAGE: stage, KEY_ID: key_id, ENGINE: engine, ATTEMPTS: attempts,
                STATUS: status, ERROR: error, INPUT_TOKENS: prompt_tokens, OUTPUT_TOKENS: completion_tokens,
            }
            span.set_attributes({k: v for k, v in attributes.items() if v is not None})
            if error is not None or status is None or status >= 500:
                span.set_status(self._error)
        span.end()

    def shutdown(self) -> None:
        """Export what is queued (bounded by the export timeout), then stop the SDK's thread."""
        self.provider.shutdown()


def start(config: TracingConfig | None) -> RequestTracer | None:
    return RequestTracer(config) if config is not None else None
