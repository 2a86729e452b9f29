"""What the release controller does at one tick: the canary's (and stable's) figures over each
window in, one verdict out. Pure, so recorded Prometheus answers give the same verdict every time.

Checks, each giving pass, breach or no verdict:
  - absolute (service/release_slo.py): the canary's figure over the objective's window against
    its limit. Fewer than `min_requests` canary attempts in that window: no evidence.
  - relative (the rule `installer release watch` applied): the canary against stable over the
    SLO's window: failed share above stable's plus the margin, TTFT p99 or e2e p95 above stable's
    times the ratio and above the latency floor. A window in which stable got fewer than
    `min_requests` attempts gives no relative verdict at all: a canary is never judged by the
    floor alone (that once rolled back a healthy canary that stable could not be compared with).

A canary that no gateway found ready at any scrape of a whole window, the step held that long,
rolls back when it also lacks min_requests over the window: its requests cannot be counted
when no gateway routes to it, so the figures alone would hold it forever (`installer release
watch` had this rule before the controller).

Then: any breach rolls back (its figures in the reasons); Prometheus unreachable holds (blind:
never promote on no figures); any check without evidence holds; a relative check without
stable traffic holds, except at 100% where stable is meant to get nothing (there the canary's
own evidence, min_requests in the window, is all a relative-only SLO can ask: absolute lines
keep judging the canary at 100%); all checks passing advance once the step was held `dwell_s`,
and at the last step that is the promotion.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from service.release_slo import LATENCY, METRICS, Objective

Action = Literal["rollback", "hold", "advance", "promote"]
# why a hold holds: what the alert and `installer release watch` show
Kind = Literal["breach", "unready", "blind", "no_evidence", "no_stable_traffic", "client_errors", "dwell",
               "awaiting_promote", "healthy"]
# A canary's share of 4xx answers is the callers' doing as much as the canary's: one caller whose
# requests land on the canary (its key's or its chosen session's bucket) can send bad parameters
# on purpose. So it never rolls back on its own; it holds the weights for a person to judge.
CLIENT_STEERED = frozenset({"client_error_ratio"})
STAGES = ("stable", "canary")


@dataclass(frozen=True)
class StageWindow:
    """One stage over one window: attempts by outcome and the latency quantiles (seconds; None
    where the histogram counted nothing)."""

    requests: float = 0.0
    outcomes: Mapping[str, float] = field(default_factory=dict)
    quantiles: Mapping[str, float | None] = field(default_factory=dict)  # metric name -> seconds

    def value(self, metric: str) -> float | None:
        kind, what, _q = METRICS[metric]
        if kind == LATENCY:
            return self.quantiles.get(metric)
        if self.requests <= 0:
            return None
        return sum(self.outcomes.get(o, 0.0) for o in what.split()) / self.requests

    def to_record(self) -> dict[str, object]:
        return {"requests": round(self.requests, 3), "outcomes": dict(self.outcomes),
                "quantiles": dict(self.quantiles)}


# window seconds -> stage -> figures
Figures = Mapping[float, Mapping[str, StageWindow]]


@dataclass(frozen=True)
class Relative:
    """ReleaseSettings.slo's comparison with stable."""

    error_ratio_margin: float = 0.02
    ttft_p99_ratio: float = 1.5
    e2e_p95_ratio: float = 1.5
    latency_floor_s: float = 0.8


@dataclass(frozen=True)
class Policy:
    window_s: float
    min_requests: int
    dwell_s: float
    relative: Relative | None = Relative()
    absolute: tuple[Objective, ...] = ()

    def window_of(self, o: Objective) -> float:
        return self.window_s if o.window_s is None else o.window_s

    def windows(self) -> list[float]:
        """Every window the figures must cover."""
        ws = {self.window_of(o) for o in self.absolute}
        if self.relative is not None:
            ws.add(self.window_s)
        return sorted(ws)

    def quantile_metrics(self) -> dict[float, set[str]]:
        """window -> the latency metrics to ask Prometheus for over it."""
        out: dict[float, set[str]] = {}
        if self.relative is not None:
            out.setdefault(self.window_s, set()).update({"ttft_p99", "e2e_p95"})
        for o in self.absolute:
            if o.kind == LATENCY:
                out.setdefault(self.window_of(o), set()).add(o.metric)
        return out


@dataclass(frozen=True)
class Verdict:
    action: Action
    kind: Kind
    reasons: tuple[str, ...]
    figures: Figures | None = None

    def describe(self) -> str:
        return f"{self.action} ({self.kind}): {'; '.join(self.reasons)}"

    def to_record(self) -> dict[str, object]:
        figures = None if self.figures is None else {
            f"{w:g}s": {stage: f.to_record() for stage, f in by_stage.items()} for w, by_stage in self.figures.items()
        }
        return {"action": self.action, "kind": self.kind, "reasons": list(self.reasons), "figures": figures}


def _fmt(metric: str, v: float) -> str:
    return f"{v * 1000:.0f} ms" if METRICS[metric][0] == LATENCY else f"{v * 100:.2f}%"


def _stage(figures: Figures, window: float, stage: str) -> StageWindow:
    return figures.get(window, {}).get(stage, StageWindow())


def _absolute(o: Objective, policy: Policy, figures: Figures) -> tuple[str, str]:
    w = policy.window_of(o)
    canary = _stage(figures, w, "canary")
    if canary.requests < policy.min_requests:
        return "no_evidence", (f"{o.describe()}: {canary.requests:.0f} canary request(s) in {w:g} s, fewer than "
                               f"min_requests {policy.min_requests}: no evidence")
    value = canary.value(o.metric)
    if value is None or math.isnan(value):
        return "no_evidence", f"{o.describe()}: the canary has no {o.metric} over {w:g} s"
    if value > o.limit:
        kind = "client_errors" if o.metric in CLIENT_STEERED else "breach"
        return kind, f"canary {o.metric} {_fmt(o.metric, value)} over {w:g} s > {o.describe()}"
    return "pass", f"canary {o.metric} {_fmt(o.metric, value)} within {o.describe()}"


def _relative(rel: Relative, policy: Policy, figures: Figures) -> list[tuple[str, str]]:
    w = policy.window_s
    canary, stable = _stage(figures, w, "canary"), _stage(figures, w, "stable")
    if canary.requests < policy.min_requests:
        return [("no_evidence", f"relative: {canary.requests:.0f} canary request(s) in {w:g} s, fewer than "
                                f"min_requests {policy.min_requests}: no evidence")]
    if stable.requests < policy.min_requests:
        return [("no_stable_traffic", f"relative: stable got {stable.requests:.0f} request(s) in {w:g} s, fewer "
                                      f"than min_requests {policy.min_requests}: nothing to compare the canary with")]
    out: list[tuple[str, str]] = []
    for metric, margin in (("error_ratio", rel.error_ratio_margin), ("client_error_ratio", rel.error_ratio_margin)):
        c, s = canary.value(metric) or 0.0, stable.value(metric) or 0.0
        if c > s + margin:
            kind = "client_errors" if metric in CLIENT_STEERED else "breach"
            out.append((kind, f"canary {metric} {_fmt(metric, c)} > stable's {_fmt(metric, s)} + margin "
                              f"{margin * 100:g}% over {w:g} s"))
    for metric, ratio in (("ttft_p99", rel.ttft_p99_ratio), ("e2e_p95", rel.e2e_p95_ratio)):
        cq, sq = canary.value(metric), stable.value(metric)
        if cq is None or sq is None or math.isnan(cq) or math.isnan(sq) or cq <= rel.latency_floor_s:
            continue
        if cq > sq * ratio:
            out.append(("breach", f"canary {metric} {_fmt(metric, cq)} > {ratio:g} x stable's {_fmt(metric, sq)} "
                                  f"and > floor {rel.latency_floor_s * 1000:.0f} ms over {w:g} s"))
    return out or [("pass", f"relative: canary within {w:g} s of stable's figures")]


def decide(policy: Policy, figures: Figures | None, *, weight: int, held_s: float, last_step: bool,
           blind_reason: str = "Prometheus unreachable", canary_ready: float | None = None) -> Verdict:
    """The verdict at `weight` percent, the step held `held_s`; `figures` None: no figures could
    be had (`blind_reason` says why). `canary_ready`: 0 when no gateway found a canary engine
    ready over the SLO's window, 1 when one did, None when no gateway said."""
    if figures is None:
        return Verdict("hold", "blind", (f"{blind_reason}: holding the weights (never promoted blind)",))
    counted = _stage(figures, policy.window_s, "canary").requests
    if canary_ready == 0 and held_s >= policy.window_s and counted < policy.min_requests:
        return Verdict("rollback", "unready", (
            f"no gateway found a canary engine ready for {policy.window_s:g} s, and {counted:.0f} canary "
            f"request(s) were counted (min_requests {policy.min_requests})",), figures)
    checks = [_absolute(o, policy, figures) for o in policy.absolute]
    if policy.relative is not None:
        checks += _relative(policy.relative, policy, figures)
    breaches = tuple(why for kind, why in checks if kind == "breach")
    if breaches:
        return Verdict("rollback", "breach", breaches, figures)
    steered = tuple(why for kind, why in checks if kind == "client_errors")
    if steered:
        return Verdict("hold", "client_errors", (*steered, "client errors hold the weights (callers can cause "
                                                            "them); `installer release abort` rolls back"), figures)
    missing = tuple(why for kind, why in checks if kind == "no_evidence")
    if missing:
        return Verdict("hold", "no_evidence", missing, figures)
    unstable = tuple(why for kind, why in checks if kind == "no_stable_traffic")
    if unstable and weight < 100:
        return Verdict("hold", "no_stable_traffic", unstable, figures)
    passed = tuple(why for kind, why in checks if kind == "pass")
    if unstable:  # at 100% stable is meant to get nothing: the canary had its evidence, no comparison
        passed += ("relative: no comparison at 100% (stable gets no caller); the canary served "
                   f"{_stage(figures, policy.window_s, 'canary').requests:.0f} request(s) in {policy.window_s:g} s",)
    if held_s < policy.dwell_s:
        return Verdict("hold", "dwell", (*passed, f"step at {weight}% held {held_s:.0f} s of dwell "
                                                  f"{policy.dwell_s:g} s"), figures)
    action: Action = "promote" if last_step else "advance"
    return Verdict(action, "healthy", (*passed, f"step at {weight}% held {held_s:.0f} s (dwell {policy.dwell_s:g} s)"),
                   figures)
