"""Columns from Prometheus on the monitoring host: traffic, latency, KV cache and GPU memory
over the last minutes, per engine (labels host and pli_engine, set by the scrape config in
playbooks/roles/monitoring/templates/prometheus.yml.j2) or per host."""

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from installer.base.errors import InstallerError
from installer.status.model import Column, Context, Row


class PrometheusError(InstallerError):
    """Prometheus did not answer a query, or answered with an error."""


def _rate(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"  # from 100 a second on, hundredths are noise


def _ms(v: float) -> str:
    return f"{v * 1000:.0f} ms"


def _pct(v: float) -> str:
    return f"{v * 100:.1f}%"


def _gib(v: float) -> str:
    return f"{v / 2**30:.1f} GiB"


@dataclass(frozen=True)
class Query:
    column: Column
    promql: str
    by_engine: bool  # keyed by (host, pli_engine); else by host, shown on each of its engines


_TTFT = 'histogram_quantile({q}, sum by (host, pli_engine, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))'
QUERIES: tuple[Query, ...] = (
    Query(Column("scraped", "scraped", lambda v: "up" if v == 1 else "[red]DOWN[/]"),
          'up{job="vllm"}', True),
    Query(Column("requests_per_s", "req/s", _rate, brief=True),
          "sum by (host, pli_engine) (rate(vllm:e2e_request_latency_seconds_count[2m]))", True),
    Query(Column("ttft_p50_s", "TTFT p50", _ms), _TTFT.format(q=0.5), True),
    Query(Column("ttft_p99_s", "TTFT p99", _ms, brief=True), _TTFT.format(q=0.99), True),
    Query(Column("tokens_per_s", "tok/s", _rate, brief=True),
          "sum by (host, pli_engine) (rate(vllm:generation_tokens_total[2m]))", True),
    Query(Column("kv_cache_usage", "KV cache", _pct),
          "max by (host, pli_engine) (vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)", True),
    Query(Column("waiting", "waiting", lambda v: f"{v:.0f}"),
          "sum by (host, pli_engine) (vllm:num_requests_waiting)", True),
    Query(Column("gpu_memory_used_bytes", "GPU mem", _gib, brief=True),
          "sum by (host) (pli_gpu_memory_used_bytes)", False),
)


class PrometheusUnreachable(PrometheusError):
    """Prometheus gave no answer at all (as opposed to refusing one query)."""


def api(base_url: str, endpoint: str, params: dict[str, str], timeout_s: float) -> list[dict[str, Any]]:
    """The `data.result` of Prometheus's /api/v1/<endpoint> (query, query_range); raises
    PrometheusError with Prometheus's own reason, PrometheusUnreachable when nothing answered."""
    url = f"{base_url.rstrip('/')}/api/v1/{endpoint}?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            reason = json.load(exc).get("error", "")
        except ValueError:
            reason = ""
        raise PrometheusError(f"Prometheus at {base_url} answered HTTP {exc.code}: {reason}") from None
    except (OSError, ValueError) as exc:
        raise PrometheusUnreachable(f"Prometheus at {base_url} did not answer: {exc}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus at {base_url}: {body.get('error', body)}")
    return body["data"]["result"]


def query(base_url: str, promql: str, timeout_s: float) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    return api(base_url, "query", {"query": promql}, timeout_s)


def _number(sample: dict[str, Any]) -> float | None:
    value = float(sample["value"][1])
    return None if value != value else value  # NaN: no data in the window (e.g. no requests)


class PrometheusCollector:
    def __init__(self, queries: Sequence[Query] = QUERIES) -> None:
        self.queries = tuple(queries)
        self.columns: Sequence[Column] = tuple(q.column for q in self.queries)

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        if ctx.prometheus_url is None:
            for row in rows:
                row.problems.append("no monitoring host: Prometheus columns left empty")
            return
        for q in self.queries:
            try:
                result = query(ctx.prometheus_url, q.promql, ctx.timeout_s)
            except PrometheusError as exc:
                for row in rows:
                    row.problems.append(str(exc))
                return  # one unreachable Prometheus is one problem, not one per column
            found: dict[tuple[str, ...], float | None] = {}
            for sample in result:
                labels = sample["metric"]
                key = (labels.get("host", ""), labels.get("pli_engine", "")) if q.by_engine else (
                    labels.get("host", ""),)
                found[key] = _number(sample)
            for row in rows:
                key = (row.host, row.engine) if q.by_engine else (row.host,)
                row.values[q.column.key] = found.get(key)
