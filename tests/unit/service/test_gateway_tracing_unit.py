"""The gateway's tracing settings, and that tracing off loads no OpenTelemetry SDK."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.config import ConfigError, load_settings
from service.tracing import start, traces_url
from tests.support import REPO

ENGINE = {"name": "e1", "url": "http://127.0.0.1:8000", "model": "m"}


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracing: object):  # type: ignore[no-untyped-def]
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"engines": [ENGINE], "allow_anonymous": True, "tracing": tracing}))
    monkeypatch.setenv("PLI_GATEWAY_CONFIG", str(path))
    return load_settings()


@pytest.mark.parametrize(
    ("tracing", "message"),
    [
        ({}, "tracing.otlp_endpoint: Field required"),
        ({"otlp_endpoint": "collector:4318"}, "tracing.otlp_endpoint: String should match"),
        ({"otlp_endpoint": "grpc://collector:4317"}, "tracing.otlp_endpoint: String should match"),
        ({"otlp_endpoint": "http://user:secret@collector:4318"}, "tracing.otlp_endpoint: String should match"),
        ({"otlp_endpoint": "http://collector:4318?token=x"}, "tracing.otlp_endpoint: String should match"),
        ({"otlp_endpoint": "http://c:4318", "sample_ratio": 1.5}, "tracing.sample_ratio"),
        ({"otlp_endpoint": "http://c:4318", "max_queue_size": 0}, "tracing.max_queue_size"),
        ({"otlp_endpoint": "http://c:4318", "endpoint": "x"}, "tracing.endpoint: Extra inputs"),
    ],
)
def test_bad_tracing_settings_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracing: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, monkeypatch, tracing)


def test_a_collector_url_is_taken_and_traces_go_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _load(tmp_path, monkeypatch, {"otlp_endpoint": "https://otel.example.internal:4318/"})
    assert settings.tracing is not None
    assert traces_url(settings.tracing.otlp_endpoint) == "https://otel.example.internal:4318/v1/traces"
    assert traces_url("http://gw.example/otlp") == "http://gw.example/otlp/v1/traces"
    assert _load(tmp_path, monkeypatch, None).tracing is None


def test_tracing_off_loads_no_sdk_and_sets_no_provider() -> None:
    # A fresh interpreter: the gateway's whole request path, with tracing unset. FastAPI itself
    # imports opentelemetry-api (its native telemetry, on only when a global provider is set).
    code = (
        "import sys, service.__main__, service.app, service.proxy, service.tracing\n"
        "from opentelemetry import trace\n"
        "assert service.tracing.start(None) is None\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter')))\n"
        "assert not loaded, loaded\n"
        "assert type(trace.get_tracer_provider()).__name__ == 'ProxyTracerProvider'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_tracing_on_builds_a_provider_without_touching_the_global_one() -> None:
    from opentelemetry import trace

    from service.config import TracingConfig

    tracer = start(TracingConfig(otlp_endpoint="http://127.0.0.1:9"))
    assert tracer is not None
    try:
        span, onward = tracer.start("/v1/completions", {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}, 0.0)
        assert onward["traceparent"].startswith("00-" + "a" * 32 + "-")
        assert onward["traceparent"] != "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
        tracer.finish(span, model="m", stage="stable", key_id="k", engine="e1", attempts=1, status=200,
                      error=None, prompt_tokens=3, completion_tokens=None)
        assert not isinstance(trace.get_tracer_provider(), type(tracer.provider))
    finally:
        tracer.provider.shutdown()
