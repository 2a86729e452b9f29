"""Absolute SLOs of a gray release as users write them, one line each:

    e2e_p95 <= 800 ms over 2 min
    ttft_p99 <= 2 s
    error_ratio <= 1%

A metric of the table below, `<=` (or `≤`), a limit (a latency in ms or s, a ratio as a
fraction or a percent), and optionally `over` a window (s, min, h; without one the SLO's own
window). The canary alone is held to it (its figures over the window, from Prometheus).

One grammar for the inventory's validation (installer/inventory/release.py) and the controller
on the monitoring host (service/release_controller.py), so a line the inventory accepts is the
line the controller judges.
"""

import re
from dataclasses import dataclass

# metric -> (kind, histogram or outcome set, quantile); the stage series of service/metrics.py
LATENCY, RATIO = "latency", "ratio"
DURATION = "pli_gateway_stage_request_duration_seconds"
TTFT = "pli_gateway_stage_ttft_seconds"
METRICS: dict[str, tuple[str, str, float]] = {
    **{f"e2e_p{q}": (LATENCY, DURATION, q / 100) for q in (50, 90, 95, 99)},
    **{f"ttft_p{q}": (LATENCY, TTFT, q / 100) for q in (50, 90, 95, 99)},
    "error_ratio": (RATIO, "error bad_output", 0.0),  # failed attempts (errors and bad outputs)
    "client_error_ratio": (RATIO, "client_error", 0.0),  # 4xx answers per attempt
}

_LINE = re.compile(
    r"\s*(?P<metric>[A-Za-z0-9_]+)\s*(?P<op><=|≤)\s*(?P<limit>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|%)?"
    r"(?:\s+over\s+(?P<window>\d+(?:\.\d+)?)\s*(?P<wunit>s|sec|min|m|h))?\s*"
)
_WINDOW_UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
MAX_WINDOW_S = 86_400


@dataclass(frozen=True)
class Objective:
    """`metric` at most `limit` (seconds, or a ratio 0..1) over `window_s` (None: the SLO's)."""

    metric: str
    limit: float
    window_s: float | None = None

    @property
    def kind(self) -> str:
        return METRICS[self.metric][0]

    def describe(self) -> str:
        limit = f"{self.limit * 1000:g} ms" if self.kind == LATENCY else f"{self.limit * 100:g}%"
        over = "" if self.window_s is None else f" over {self.window_s:g} s"
        return f"{self.metric} <= {limit}{over}"


def parse(text: str) -> Objective:
    """The objective of one line, or ValueError saying what is wrong with it."""
    m = _LINE.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not an SLO line: write `METRIC <= LIMIT [over WINDOW]`, e.g. "
            "`e2e_p95 <= 800 ms over 2 min`, `ttft_p99 <= 2 s`, `error_ratio <= 1%`"
        )
    metric, unit = m["metric"], m["unit"]
    if metric not in METRICS:
        raise ValueError(f"{text!r}: no metric {metric!r}; the gateways export {', '.join(sorted(METRICS))}")
    limit = float(m["limit"])
    if METRICS[metric][0] == LATENCY:
        if unit not in ("ms", "s"):
            raise ValueError(f"{text!r}: {metric} is a latency: give its limit in ms or s")
        limit = limit / 1000 if unit == "ms" else limit
        if limit <= 0:
            raise ValueError(f"{text!r}: a latency limit must be above 0")
    else:
        if unit in ("ms", "s"):
            raise ValueError(f"{text!r}: {metric} is a ratio: give a fraction (0.01) or a percent (1%)")
        limit = limit / 100 if unit == "%" else limit
        if limit > 1:
            raise ValueError(f"{text!r}: a ratio is at most 1 (100%)")
    window = None
    if m["window"] is not None:
        window = float(m["window"]) * _WINDOW_UNITS[m["wunit"]]
        if not 0 < window <= MAX_WINDOW_S:
            raise ValueError(f"{text!r}: a window is above 0 and at most {MAX_WINDOW_S} s")
    return Objective(metric, limit, window)
