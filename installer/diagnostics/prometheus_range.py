"""The deployment's key Prometheus series over the last hour, as CSV rows for the support
archive: the `installer status` queries (installer/status/prometheus.py) and the gateway, GPU
(memory and its slope, the leak alert's `deriv`), Xid, ECC and node series beside them."""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from typing import Any

from installer.status.prometheus import QUERIES, PrometheusError, PrometheusUnreachable, api

WINDOW_S = 3600
STEP_S = 30
SERIES: tuple[tuple[str, str], ...] = (
    *((q.column.key, q.promql) for q in QUERIES),
    ("gateway_up", 'up{job="gateway"}'),
    ("gateway_requests_per_s", "sum by (host, status) (rate(pli_gateway_requests_total[2m]))"),
    ("gpu_memory_used_bytes_per_gpu", "pli_gpu_memory_used_bytes"),
    ("gpu_memory_total_bytes", "pli_gpu_memory_total_bytes"),
    # what PLIGPUMemoryLeak watches (playbooks/roles/monitoring/templates/alerts.yml.j2)
    ("gpu_memory_slope_bytes_per_s", "deriv(pli_gpu_memory_used_bytes[30m])"),
    ("gpu_utilization_ratio", "pli_gpu_utilization_ratio"),
    ("gpu_temperature_celsius", "pli_gpu_temperature_celsius"),
    ("gpu_power_watts", "pli_gpu_power_watts"),
    ("gpu_xid_errors_10m", "increase(pli_gpu_xid_errors_total[10m])"),
    ("gpu_ecc_errors_total", "pli_gpu_ecc_errors_total"),
    ("node_load1", "node_load1"),
    ("node_memory_available_bytes", "node_memory_MemAvailable_bytes"),
)
COLUMNS = ("series", "host", "pli_engine", "labels", "time", "value")


@dataclass
class Export:
    rows: list[dict[str, str]] = field(default_factory=list)
    no_data: list[str] = field(default_factory=list)  # series with no sample in the window
    errors: dict[str, str] = field(default_factory=dict)  # series Prometheus refused, and why

    def csv(self, host: str | None = None) -> str:
        """All rows, or those of one host (its `host` label)."""
        out = io.StringIO()
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(r for r in self.rows if host is None or r["host"] == host)
        return out.getvalue()


def query_range(base_url: str, promql: str, start: float, end: float, step: float,
                timeout_s: float) -> list[dict[str, Any]]:
    """A range query's result matrix (installer/status/prometheus.py's `api`)."""
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    return api(base_url, "query_range", params, timeout_s)


def export(base_url: str, timeout_s: float, end: float | None = None,
           series: tuple[tuple[str, str], ...] = SERIES) -> Export:
    """Every series over [end - 1 h, end]; raises PrometheusUnreachable when Prometheus is not
    there (no other query is tried), and keeps a series it refuses as an error of that series only."""
    end = time.time() if end is None else end
    result = Export()
    for name, promql in series:
        try:
            matrix = query_range(base_url, promql, end - WINDOW_S, end, STEP_S, timeout_s)
        except PrometheusUnreachable:
            raise
        except PrometheusError as exc:
            result.errors[name] = str(exc)
            continue
        if not matrix:
            result.no_data.append(name)
        for item in matrix:
            labels = dict(item["metric"])
            host, engine = labels.pop("host", ""), labels.pop("pli_engine", "")
            rest = ";".join(f"{k}={v}" for k, v in sorted(labels.items()))
            for stamp, value in item["values"]:
                result.rows.append({
                    "series": name, "host": host, "pli_engine": engine, "labels": rest,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(stamp))), "value": value,
                })
    return result
