"""`installer status` against stand-ins on loopback: two gateways' /readyz and a Prometheus
query API answering the way the real ones do (the e2e test runs it against the real ones)."""

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer import status as st
from installer.diagnostics import prometheus_range
from installer.inventory.models import Inventory

# Every gateway routes over every engine; h2's own engine is down, its gateway still ready.
READY = {"127.0.0.1": (200, {"status": "ready", "engines": {"h1": True, "h2": False}}),
         "127.0.0.2": (200, {"status": "ready", "engines": {"h1": True, "h2": False}})}
# (substring of the PromQL, result vector)
PROM = [
    ('up{job="vllm"}', [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "1"]},
                        {"metric": {"host": "h2", "pli_engine": "h2"}, "value": [0, "0"]}]),
    ("e2e_request_latency_seconds_count", [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "2.5"]}]),
    ("histogram_quantile(0.5,", [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "0.120"]}]),
    ("histogram_quantile(0.99,", [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "NaN"]}]),
    ("generation_tokens_total", [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "40"]}]),
    ("kv_cache_usage_perc", [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "0.25"]}]),
    ("num_requests_waiting", [{"metric": {"host": "h1", "pli_engine": "h1"}, "value": [0, "3"]}]),
    ("pli_gpu_memory_used_bytes", [{"metric": {"host": "h2"}, "value": [0, str(80 * 2**30)]}]),
]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        if url.path == "/readyz":
            self._send(*READY[self.server.server_address[0]])
        elif url.path in ("/api/v1/query", "/api/v1/query_range"):
            promql = urllib.parse.parse_qs(url.query)["query"][0]
            if "syntax error" in promql:
                self._send(400, {"status": "error", "errorType": "bad_data", "error": "parse error"})
                return
            result = next((r for key, r in PROM if key in promql), [])
            self._send(200, {"status": "success", "data": {"resultType": "vector", "result": result}})
        else:
            self._send(404, {})


@pytest.fixture
def servers() -> Iterator[int]:
    first = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port = first.server_address[1]
    second = ThreadingHTTPServer(("127.0.0.2", port), _Handler)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (first, second)]
    for t in threads:
        t.start()
    yield port
    for s in (first, second):
        s.shutdown()
        s.server_close()


def _inventory(port: int) -> Inventory:
    return Inventory.model_validate({
        "deployment": "lab", "model": {"path": "/m", "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "127.0.0.1"}, {"name": "h2", "address": "127.0.0.2"}],
        "ports": {"engine": 1, "gateway": port}, "tls": {"mode": "off"},
    })


def test_rows_per_host_and_engine_from_gateways_and_prometheus(servers: int) -> None:
    ctx = st.Context(_inventory(servers), f"http://127.0.0.1:{servers}", timeout_s=5)
    report = st.collect(ctx, st.COLLECTORS, lambda h: [h.name])
    h1, h2 = report.rows
    assert (h1.host, h1.engine, h2.host, h2.engine) == ("h1", "h1", "h2", "h2")
    assert h1.values["ready"] is True and h2.values["ready"] is False
    assert "engine h2 not ready (its gateway's /readyz: ready)" in h2.problems
    assert h1.values["model"] == "tiny"
    assert h1.values["requests_per_s"] == 2.5
    assert h1.values["ttft_p50_s"] == 0.12
    assert h1.values["ttft_p99_s"] is None  # NaN: no requests in the window
    assert h1.values["kv_cache_usage"] == 0.25
    assert h2.values["scraped"] == 0
    assert h2.values["gpu_memory_used_bytes"] == 80 * 2**30  # per host, shown on its engines
    doc = report.to_json()
    assert doc["rows"][0]["tokens_per_s"] == 40
    cells = report.table_rows()[0]
    assert cells[:2] == ["h1", "h1"] and "120 ms" in cells and "25.0%" in cells


def test_an_unreachable_prometheus_and_gateway_are_problems_not_crashes(servers: int) -> None:
    inv = _inventory(servers)
    ctx = st.Context(inv, "http://127.0.0.1:1", timeout_s=2)
    report = st.collect(ctx, [st.PrometheusCollector()], lambda h: [h.name])
    assert all(r.values == {} for r in report.rows)
    assert "did not answer" in report.rows[0].problems[0]
    assert len(report.rows[0].problems) == 1  # once, not once per column
    ctx = st.Context(inv.model_copy(update={"ports": inv.ports.model_copy(update={"gateway": 1})}), None)
    report = st.collect(ctx, [st.ReadinessCollector()], lambda h: [h.name])
    assert report.rows[0].values["ready"] is False
    assert report.rows[0].problems[0].startswith("gateway unreachable")


def test_prometheus_errors_carry_its_reason(servers: int) -> None:
    with pytest.raises(st.prometheus.PrometheusError, match="HTTP 400: parse error"):
        st.prometheus.query(f"http://127.0.0.1:{servers}", "syntax error", 5)


def test_instant_and_range_queries_share_one_client(servers: int) -> None:
    """`installer status` and the support archive's CSV ask Prometheus through one function:
    the same reason for a refused query, the same PrometheusUnreachable when nothing answers."""
    url = f"http://127.0.0.1:{servers}"
    for ask in (lambda u: st.prometheus.query(u, "syntax error", 5),
                lambda u: prometheus_range.query_range(u, "syntax error", 0, 60, 30, 5)):
        with pytest.raises(st.prometheus.PrometheusError, match="HTTP 400: parse error") as refused:
            ask(url)
        assert not isinstance(refused.value, st.prometheus.PrometheusUnreachable)
        with pytest.raises(st.prometheus.PrometheusUnreachable, match="did not answer"):
            ask("http://127.0.0.1:1")
    assert prometheus_range.PrometheusUnreachable is st.prometheus.PrometheusUnreachable


def test_other_modules_add_columns_with_a_collector(servers: int) -> None:
    class CertDays:
        columns = (st.Column("cert_days", "cert days", lambda v: f"{v} d"),)

        def collect(self, ctx: st.Context, rows: list[st.Row]) -> None:
            for row in rows:
                row.values["cert_days"] = 42

    ctx = st.Context(_inventory(servers), None)
    report = st.collect(ctx, [st.ReadinessCollector(), CertDays()], lambda h: [h.name])
    assert [c.key for c in report.columns] == ["ready", "cert_days"]
    assert report.table_rows()[0][-1] == "42 d"


def test_cli_json_and_table(servers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from installer.cli import _register, app

    _register()
    # This module's collectors only: others (release drift over SSH) have tests of their own.
    monkeypatch.setattr(st, "COLLECTORS", [st.DeploymentCollector(), st.ReadinessCollector(), st.PrometheusCollector()])
    inv = tmp_path / "inv.yml"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    inv.write_text(
        "deployment: lab\nhosts:\n  - {name: h1, address: 127.0.0.1}\n  - {name: h2, address: 127.0.0.2}\n"
        f"model: {{path: m, served_name: tiny}}\nports: {{engine: 1, gateway: {servers}}}\ntls: {{mode: 'off'}}\n"
    )
    prom = f"http://127.0.0.1:{servers}"
    out = CliRunner().invoke(app, ["status", "-i", str(inv), "--prometheus", prom, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [(r["host"], r["ready"]) for r in doc["rows"]] == [("h1", True), ("h2", False)]
    out = CliRunner().invoke(app, ["status", "-i", str(inv), "--prometheus", prom])
    assert out.exit_code == 0, out.output
    assert "NOT READY" in out.output and "h2/h2: engine h2 not ready" in out.output
