"""Prometheus metrics of the gateway, in a registry of its own (one per app).

With several workers (service/prefork.py) the supervisor sets PROMETHEUS_MULTIPROC_DIR before
any of this is imported, so every worker's values go to files there and a scrape, whichever
worker answers it, adds them up (`multiprocess_mode` says how for gauges).
"""

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess


def scrape_registry(own: CollectorRegistry) -> CollectorRegistry:
    """What /metrics serves: this process's registry, or every worker's values."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return own
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5)
_E2E_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# A release compares its stages' p95/p99 with each other (ratios) and with the SLO's latency
# floor (0.8 s by default): steps fine enough around a second for both.
_STAGE_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.2, 1.5, 2, 2.5, 3, 4, 5,
    7.5, 10, 15, 20, 30, 60, 120, 300, 600,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        p = "pli_gateway_"

        # The gateway's counters and histograms: its prefix and registry given once.
        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(p + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Histogram:
            return Histogram(p + name, doc, labels, buckets=buckets, registry=r)

        self.requests = counter(
            "requests", "API requests by model, key name and HTTP status", ("model", "key", "status")
        )
        self.request_seconds = histogram(
            "request_duration_seconds", "end-to-end request latency at the gateway", ("model",), _E2E_BUCKETS
        )
        self.ttft = histogram(
            "time_to_first_token_seconds", "gateway receipt of a request to its first streamed byte", ("model",),
            _TTFT_BUCKETS,
        )
        self.itl = histogram("inter_token_latency_seconds", "gap between streamed chunks, as relayed", ("model",),
                             _ITL_BUCKETS)
        self.prompt_tokens = counter("prompt_tokens", "prompt tokens reported by the engines", ("model", "key"))
        self.completion_tokens = counter(
            "completion_tokens", "completion tokens reported by the engines", ("model", "key")
        )
        self.in_flight = Gauge(
            p + "in_flight_requests", "API requests being served", registry=r, multiprocess_mode="livesum"
        )
        self.upstream_errors = counter("upstream_errors", "failed exchanges with engines", ("engine", "reason"))
        self.engine_healthy = Gauge(
            p + "engine_healthy",
            "1 if the engine passed a readiness check recently",
            ["engine", "model"],
            registry=r,
            # a worker that saw the engine fail says so before the others' next check
            multiprocess_mode="livemin",
        )
        # No gateway prefix: one name for every TLS endpoint of the deployment (alerts use it).
        self.cert_expiry = Gauge(
            "pli_tls_cert_expiry_timestamp_seconds",
            "notAfter of the certificate being served, as a Unix time",
            registry=r,
            multiprocess_mode="livemax",
        )
        # Per attempt, by release stage (service/stages.py): what `installer release watch`
        # compares. A canary attempt retried on stable counts once for each stage; one whose
        # client left before its first byte is an error.
        self.stage_requests = counter(
            "stage_requests",
            "engine attempts by model, release stage and outcome (ok, error, client_error, bad_output)",
            ("model", "stage", "outcome"),
        )
        # Attempts kept out of the figures above, by why (service/evidence.py).
        self.unjudged_requests = counter(
            "unjudged_requests",
            "engine attempts left out of the release figures, by model, stage, outcome and reason "
            "(forced: the request named its stage; key_share: one key past its share of the window)",
            ("model", "stage", "outcome", "reason"),
        )
        self.stage_ttft = histogram(
            "stage_ttft_seconds",
            "an attempt's start to its first response byte (a timed-out canary: the timeout; "
            "a client that left first: when it left)",
            ("model", "stage"),
            _STAGE_BUCKETS,
        )
        self.stage_seconds = histogram(
            "stage_request_duration_seconds", "an attempt's start to its end", ("model", "stage"), _STAGE_BUCKETS
        )
        # Streams whose engine broke off after the first byte (service/stream_resume.py).
        self.stream_resumed = counter(
            "stream_resumed",
            "streams broken off by their engine, by model and outcome (resumed: finished from another "
            "engine; failed: the next engine failed too; "
            "client_disconnected; else why it was not resumed: off, n, logprobs, reasoning, tool_call, "
            "no_engine, ...)",
            ("model", "outcome"),
        )
        self.limiter_errors = counter("limiter_errors", "rate-limit checks skipped because the shared store failed")
        # A limit or quota check that found Redis unreachable, and what limits.redis_on_unavailable
        # made of it (service/redis_outage.py): the alert PLIGatewayRedisUnavailable reads it.
        self.redis_unavailable = counter(
            "redis_unavailable",
            "limit (rate) and quota checks made while Redis was unreachable, by check and action "
            "(admitted: on_unavailable open; refused: closed, answered 503)",
            ("check", "action"),
        )
        # Refused requests the audit trail counted but did not record one by one, today's file
        # being at its cap (service/request_audit.py): the alert PLIGatewayRequestAuditCapped.
        self.audit_unrecorded = counter(
            "request_audit_unrecorded",
            "refused requests counted in the audit trail's summary records, not one by one (daily cap reached)",
        )
        # Every series from 0, so the alert's increase() sees an outage's first check too (a
        # series born at 1 has no earlier sample to increase from).
        for check in ("limits", "quota"):
            for action in ("admitted", "refused"):
                self.redis_unavailable.labels(check, action)
