"""The `monitoring:` section: Prometheus, Alertmanager, alert thresholds and tracing."""

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from installer.inventory.fields import LocalPath, Port, Strict, matching, unset_dropped

# A Prometheus duration: 30s, 5m, 15d, 1y (what --storage.tsdb.retention.time and `for:` take).
Duration = Annotated[str, matching(
    r"[0-9]+(ms|s|m|h|d|w|y)", "a duration: a whole number and one of ms, s, m, h, d, w, y (e.g. 15d)"
)]


class Monitoring(Strict):
    """Prometheus, Alertmanager and the alert thresholds (playbooks/roles/monitoring)."""

    prometheus_port: Port = 9090
    retention: Duration = "15d"
    scrape_interval: Duration = "15s"
    # Alert when the engines' TTFT p99 over 5 minutes stays above this many seconds.
    ttft_p99_target_s: Annotated[float, Field(gt=0, le=600)] = 2.0
    # Alert when more than this share of requests fail (HTTP 5xx at the gateways).
    error_rate_max: Annotated[float, Field(gt=0, lt=1)] = 0.05
    # test: every alert's `for:` is 10s and scrapes are every 5s, so a lab sees alerts fire in
    # seconds; production: durations that ride out a restart or one slow scrape.
    alert_profile: Literal["production", "test"] = "production"
    # Alertmanager sends every alert to this webhook (e.g. a pager bridge); empty: none.
    webhook_url: Annotated[str, matching(
        r"https?://\S+", "an http:// or https:// URL without spaces"
    )] | None = None
    # packages: Debian's prometheus, prometheus-alertmanager and prometheus-node-exporter from the
    # bundle's apt repository. tarballs: the upstream release tarballs in tarballs_dir
    # (prometheus-<v>.linux-amd64.tar.gz, alertmanager-..., node_exporter-...), carried by the
    # bundle and unpacked on the hosts (installer/bundle/monitoring_tarballs.py checks them).
    install_from: Literal["packages", "tarballs"] = "packages"
    tarballs_dir: LocalPath | None = None
    # An OpenTelemetry collector's OTLP/HTTP base URL (as OTEL_EXPORTER_OTLP_ENDPOINT: traces go
    # to <it>/v1/traces). The gateways export a span per request and the engines vLLM's own spans
    # (docs/tracing.md); None: no tracing, and no exporter is loaded. No user or query: the URL
    # is in the engines' command lines.
    otlp_endpoint: Annotated[str, matching(
        r"https?://[^/\s@?#]+(/[^\s?#]*)?",
        "an http:// or https:// URL without a user, query or fragment (e.g. http://otel.example.internal:4318)",
    )] | None = None
    # The share of requests traced when the client sent no traceparent (a client's sampled flag
    # is followed); the engines follow the gateway's decision.
    trace_sample_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0

    def otlp_traces_url(self) -> str | None:
        """Where spans are posted: the collector's base URL and OTLP/HTTP's signal path."""
        return self.otlp_endpoint.rstrip("/") + "/v1/traces" if self.otlp_endpoint else None

    @model_serializer(mode="wrap")
    def _dump_tracing_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return unset_dropped(self, handler(self), ("otlp_endpoint", "trace_sample_ratio"))

    @model_validator(mode="after")
    def _tarballs(self) -> "Monitoring":
        if self.install_from == "tarballs" and self.tarballs_dir is None:
            raise ValueError(
                "install_from tarballs needs tarballs_dir: a folder with the upstream "
                "prometheus-, alertmanager- and node_exporter-<version>.linux-amd64.tar.gz"
            )
        if self.install_from == "packages" and self.tarballs_dir is not None:
            raise ValueError("tarballs_dir is used only with install_from: tarballs; remove it or set that")
        return self
