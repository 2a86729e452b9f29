"""`installer status`'s table: the default one keeps to the columns users look at first and fits
100 columns, `--wide` shows every column whole, `--json` every value. A realistic report: three
hosts, a second engine and a second model, a gray release in progress, one engine down."""

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from installer import status as st
from installer.cli import status as status_cli
from installer.release.collector import StageCollector

RELEASE = "r-3f9a1c7be2d4"
# Every column a collector declares, in the order installer.status.COLLECTORS runs them.
COLUMNS = [c for collector in (StageCollector(), st.DeploymentCollector(), st.ReleaseCollector(),
                               st.ReadinessCollector(), st.CertCollector(), st.PrometheusCollector())
           for c in collector.columns]
KEYS = {"stage", "stage_error_ratio", "stage_e2e_p95_s", "model", "release", "revision", "host_release", "drift",
        "ready", "cert_days_left", "scraped", "requests_per_s", "ttft_p50_s", "ttft_p99_s", "tokens_per_s",
        "kv_cache_usage", "waiting", "gpu_memory_used_bytes"}


def _row(host: str, engine: str, stage: str | None, ready: bool = True) -> st.Row:
    values = {
        "stage": stage, "stage_error_ratio": 0.0123, "stage_e2e_p95_s": 12.345, "model": "deepseek-ai/DeepSeek-V3",
        "release": RELEASE, "revision": 12, "host_release": RELEASE, "drift": "none", "ready": ready,
        "cert_days_left": 300.2, "scraped": 1 if ready else 0, "requests_per_s": 123.45, "ttft_p50_s": 0.456,
        "ttft_p99_s": 1.234, "tokens_per_s": 12345.67, "kv_cache_usage": 0.873, "waiting": 12.0,
        "gpu_memory_used_bytes": 132.2 * 2**30,
    }
    problems = [] if ready else [f"engine {engine} not ready (its gateway's /readyz: ready)"]
    return st.Row(host, f"10.0.0.{host[-1]}", engine, values, problems)


def _report() -> st.StatusReport:
    rows = []
    for host in ("gpu-node-01", "gpu-node-02", "gpu-node-03"):
        rows += [_row(host, host, "stable 90%"), _row(host, f"{host}-1", "stable 90%"),
                 _row(host, f"{host}-chat", None)]
    rows += [_row("gpu-node-01", "gpu-node-01-canary", "canary 10%", ready=False),
             _row("gpu-node-01", "gpu-node-01-chat-canary", "canary 10%")]
    rows[4].values.update(requests_per_s=None, ttft_p99_s=None)  # no traffic in the window
    return st.StatusReport("production", "http://10.0.0.1:9090", COLUMNS, rows, 1_765_000_000.0)


def _text(renderable: object, width: int) -> list[str]:
    console = Console(width=width, record=True, highlight=False)
    console.print(renderable)
    return console.export_text().splitlines()


def test_the_default_table_fits_100_columns_with_every_header_whole() -> None:
    report = _report()
    headers = report.headers(wide=False)
    assert headers == ["engine", "stage", "release", "ready", "req/s", "TTFT p99", "tok/s", "GPU mem"]
    natural = _text(status_cli._table(report, wide=False), 400)
    assert max(len(line) for line in natural) <= 100
    lines = _text(status_cli._table(report, wide=False), 100)
    assert lines == natural  # nothing squeezed to fit
    assert re.split(r" {2,}", lines[1].strip()) == headers
    assert not any("…" in line for line in lines)
    assert any(line.startswith("gpu-node-01-chat-canary ") and "canary 10%" in line for line in lines)
    assert any("NOT READY" in line for line in lines)


def test_wide_shows_every_column() -> None:
    report = _report()
    assert report.headers(wide=True) == ["host", "engine", *[c.header for c in COLUMNS]]
    assert all(len(cells) == 2 + len(COLUMNS) for cells in report.table_rows(wide=True))
    assert len(report.table_rows(wide=False)[0]) == len(report.headers(wide=False))


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., str]:
    from installer.cli import _register, app

    _register()
    monkeypatch.setattr(status_cli, "load_inventory", lambda path: None)
    monkeypatch.setattr(status_cli, "status_report", lambda inv, prometheus, timeout: _report())
    site = tmp_path / "site.yml"
    site.write_text("")

    def invoke(*args: str) -> str:
        out = CliRunner().invoke(app, ["status", "-i", str(site), *args])
        assert out.exit_code == 0, out.output
        return out.output

    return invoke


def test_cli_default_wide_and_json(cli: Callable[..., str]) -> None:
    brief = cli()
    table = brief.split("\n  gpu-node-01/")[0].splitlines()
    assert max(len(line) for line in table) <= 100
    assert "drift" not in brief and "TTFT p50" not in brief and "TTFT p99" in brief
    assert "gpu-node-01/gpu-node-01-canary: engine gpu-node-01-canary not ready" in brief
    # Into a pipe, --wide is not cut to the console's width: every header whole.
    wide = cli("--wide")
    header = next(line for line in wide.splitlines() if line.startswith("host "))
    assert all(h in header for h in _report().headers(wide=True)) and "…" not in wide
    assert len(header) > 160
    doc = json.loads(cli("--json"))
    assert doc == json.loads(json.dumps(_report().to_json()))
    assert all(set(row) == {"host", "address", "engine", "problems", *KEYS} for row in doc["rows"])
    assert json.loads(cli("--json", "--wide")) == doc


def test_the_docs_example_is_what_the_table_prints() -> None:
    def row(engine: str, stage: str, rps: float, ttft: float, toks: float, gib: float) -> st.Row:
        values = {"stage": stage, "release": RELEASE, "ready": True, "requests_per_s": rps, "ttft_p99_s": ttft,
                  "tokens_per_s": toks, "gpu_memory_used_bytes": gib * 2**30}
        return st.Row(engine[:11], "", engine, values)

    rows = [row("gpu-node-01", "stable 90%", 41.3, 0.412, 5873.2, 132.2),
            row("gpu-node-01-canary", "canary 10%", 4.62, 0.455, 651.0, 132.2),
            row("gpu-node-02", "stable 90%", 40.8, 0.398, 5790.6, 131.9)]
    report = st.StatusReport("production", "http://10.0.0.1:9090", COLUMNS, rows, 0.0)
    printed = [line.rstrip() for line in _text(status_cli._render(report, wide=False), 100)]
    docs = (Path(__file__).resolve().parents[3] / "docs" / "monitoring.md").read_text()
    example = docs.split("## `installer status`")[1].split("```")[1].strip().splitlines()
    title = "deployment production — {}, Prometheus http://10.0.0.1:9090"
    assert printed[0] == title.format(time.strftime("%H:%M:%S", time.localtime(0.0)))
    assert example[0] == title.format("14:02:51") and example[1:] == printed[1:]
