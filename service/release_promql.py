"""A release's figures over its windows, from the monitoring host's Prometheus (HTTP API,
/api/v1/query): counts as `increase` over the window and quantiles as `histogram_quantile` of
the buckets' `rate` over it, summed over every gateway Prometheus scrapes. Over the window, not
since a gateway started, and a gateway that restarted mid-window is a counter reset Prometheus
already reads as one.

The queries and the reading of the answers are pure (tests feed recorded answers); `fetch` is
the one call over the network, and any failure of it is `Unreachable` (the controller holds).
"""

import json
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from service.release_slo import METRICS
from service.release_verdict import Figures, Policy, StageWindow

REQUESTS = "pli_gateway_stage_requests_total"
READY = "pli_gateway_engine_healthy"


class Unreachable(Exception):
    """No usable answer from Prometheus."""


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def requests_query(served: str, window_s: float) -> str:
    return (f'sum by (stage, outcome) (increase({REQUESTS}{{model="{_label(served)}"}}'
            f"[{int(window_s)}s]))")


def quantile_query(served: str, metric: str, window_s: float) -> str:
    _kind, histogram, q = METRICS[metric]
    return (f"histogram_quantile({q:g}, sum by (stage, le) (rate({histogram}_bucket"
            f'{{model="{_label(served)}"}}[{int(window_s)}s])))')


def queries(served: str, policy: Policy) -> dict[tuple[float, str], str]:
    """(window, "requests" or a latency metric) -> PromQL."""
    out = {(w, "requests"): requests_query(served, w) for w in policy.windows()}
    for w, metrics in policy.quantile_metrics().items():
        for metric in sorted(metrics):
            out[(w, metric)] = quantile_query(served, metric, w)
    return out


def vector(answer: Mapping[str, Any]) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of an instant-vector answer; Unreachable for an error or another shape."""
    if answer.get("status") != "success":
        raise Unreachable(f"Prometheus answered {answer.get('errorType', 'an error')}: {answer.get('error', '?')}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise Unreachable(f"Prometheus answered a {data.get('resultType')!r}, not a vector")
    out = []
    for item in data["result"]:
        try:
            out.append((dict(item["metric"]), float(item["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise Unreachable(f"a sample Prometheus answered is unreadable: {exc}") from None
    return out


def figures(answers: Mapping[tuple[float, str], Mapping[str, Any]]) -> Figures:
    """The figures of each window from the answers to `queries`."""
    requests: dict[float, dict[str, dict[str, float]]] = {}
    quantiles: dict[float, dict[str, dict[str, float | None]]] = {}
    for (w, what), answer in answers.items():
        for labels, value in vector(answer):
            stage = labels.get("stage")
            if stage is None:
                continue
            if what == "requests":
                outcome = labels.get("outcome", "")
                by_outcome = requests.setdefault(w, {}).setdefault(stage, {})
                by_outcome[outcome] = by_outcome.get(outcome, 0.0) + value
            else:  # NaN: the histogram counted nothing in the window
                quantiles.setdefault(w, {}).setdefault(stage, {})[what] = None if math.isnan(value) else value
    out: dict[float, dict[str, StageWindow]] = {}
    for w in {w for w, _ in answers}:
        stages = set(requests.get(w, {})) | set(quantiles.get(w, {}))
        out[w] = {
            s: StageWindow(sum(requests.get(w, {}).get(s, {}).values()), requests.get(w, {}).get(s, {}),
                           quantiles.get(w, {}).get(s, {}))
            for s in stages
        }
    return out


Query = Callable[[str], Mapping[str, Any]]


def http_query(base_url: str, timeout_s: float = 5.0) -> Query:
    """A query function on Prometheus at `base_url` (its own loopback listener on the monitoring
    host); any failure is Unreachable."""
    def query(promql: str) -> Mapping[str, Any]:
        url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except Exception as exc:  # any failure to get figures is the same: no figures
            raise Unreachable(f"Prometheus at {base_url}: {exc}") from None
    return query


def within(query: Query, deadline: float | None) -> Query:
    """`query`, refusing to ask once `deadline` (time.monotonic) has passed: the controller gives
    one tick's queries half its lease and renews the lease after them, before it writes, so a
    slow Prometheus is a blind hold, never a lease lost mid-tick."""
    def ask(promql: str) -> Mapping[str, Any]:
        if deadline is not None and time.monotonic() > deadline:
            raise Unreachable("Prometheus answered too slowly: the tick's time for queries ran out")
        return query(promql)
    return ask


def fetch(query: Query, served: str, policy: Policy) -> Figures:
    """Every window's figures, or Unreachable."""
    return figures({key: query(q) for key, q in queries(served, policy).items()})


def ready_query(engines: list[str], window_s: float) -> str:
    """1 if any gateway found any of `engines` ready at any scrape of the window, else 0."""
    names = "|".join(_label(re.escape(e)) for e in engines)
    return f'max(max_over_time({READY}{{engine=~"{names}"}}[{int(window_s)}s]))'


def readiness(query: Query, engines: list[str], window_s: float) -> float | None:
    """ready_query's answer; None when no gateway reported the engines (no verdict on silence)."""
    if not engines:
        return None
    got = vector(query(ready_query(engines, window_s)))
    return got[0][1] if got else None
