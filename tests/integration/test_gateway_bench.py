"""`installer bench` against a gateway in front of a fake engine, through the real CLI."""

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.cli import app

# Both command modules: a typer app with a single command would run it without its name.
from installer.cli import bench as _bench_cli  # noqa: F401
from installer.cli import keys as _keys_cli  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_bench_cli(
    start_upstream: Any,
    start_gateway: Any,
    keys: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream = start_upstream()
    secret = keys.create("bench")
    gateway = start_gateway(
        {
            "keys_file": str(keys.hosts_file),
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        }
    )
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--base-url",
            gateway.url,
            "--model",
            "tiny",
            "-n",
            "40",
            "-c",
            "4",
            "--input-len",
            "64",
            "--output-len",
            "8",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output and secret not in result.output
    report = json.loads(out.read_text())
    assert report["completed"] == 40 and report["failed"] == 0
    assert report["mean_output_tokens"] == 8 and 64 <= report["mean_prompt_tokens"] <= 70
    assert report["ttft_ms"]["p50"] > 0 and report["itl_ms"]["p99"] >= report["itl_ms"]["p50"]

    failed = CliRunner().invoke(
        app, ["bench", "--base-url", gateway.url, "--model", "nope", "-n", "2"]
    )
    assert failed.exit_code != 0
