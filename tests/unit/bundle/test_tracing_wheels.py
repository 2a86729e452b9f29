"""What traces need on air-gapped hosts travels in the bundle (#35 item 4): the gateway's OTLP
exporter with the gateway's wheels, and the engine's with vLLM, which requires it."""

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from installer.bundle import planning, wheels

TRACING = {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}


def test_the_gateway_wheels_carry_the_sdk_and_the_otlp_http_exporter() -> None:
    names = {canonicalize_name(Requirement(r).name) for r in planning.gateway_requirements()}
    assert names >= TRACING


def test_the_host_torch_engine_lock_pins_what_vllm_exports_spans_with() -> None:
    reqs = wheels.host_torch_lock()["requirements"]
    assert isinstance(reqs, list)
    names = {canonicalize_name(Requirement(r).name) for r in reqs}
    # vLLM's --otlp-traces-endpoint with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf
    assert names >= TRACING | {"opentelemetry-api", "opentelemetry-exporter-otlp"}
