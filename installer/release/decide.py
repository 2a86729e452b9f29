"""The decision rule of a gray release: the canary against stable over one window.

Pure: figures in, a decision out, so a recorded series gives the same verdict every time.
  - fewer than `min_requests` canary attempts: hold (no verdict on noise);
  - the canary's failed share (errors and bad outputs), or its share of client errors (4xx: a
    canary that refuses what stable accepts), above stable's by more than the margin,
    its TTFT p99 or e2e p95 above stable's times the ratio and above the latency floor: rollback,
    each reason with both figures;
  - otherwise healthy: advance once the step was held `step_hold_s` when auto-promotion is on,
    else hold.
A latency with no stable figure to compare with (stable had no traffic) is judged by the floor.
`installer release status` shows it; the release controller decides on the deployment with
service/release_verdict.py.
"""

from dataclasses import dataclass, field
from typing import Literal, Protocol

from installer.release.metrics import StageFigures

Action = Literal["rollback", "hold", "advance"]


class Slo(Protocol):
    """ReleaseSettings.slo (installer/inventory/release.py)."""

    @property
    def window_s(self) -> int | float: ...
    @property
    def min_requests(self) -> int: ...
    @property
    def error_ratio_margin(self) -> float: ...
    @property
    def ttft_p99_ratio(self) -> float: ...
    @property
    def e2e_p95_ratio(self) -> float: ...
    @property
    def latency_floor_s(self) -> float: ...


@dataclass(frozen=True)
class Decision:
    action: Action
    reasons: list[str]
    figures: dict[str, StageFigures] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"{self.action}: {'; '.join(self.reasons)}"]
        lines += [f"  {f.describe()}" for f in self.figures.values()]
        return "\n".join(lines)


def _ms(v: float) -> str:
    return f"{v * 1000:.0f} ms"


def _slower(what: str, canary: float | None, stable: float | None, ratio: float, floor: float) -> str | None:
    if canary is None or canary <= floor:
        return None
    if stable is None:
        return f"canary {what} {_ms(canary)} > floor {_ms(floor)} (stable has no figure)"
    if canary > stable * ratio:
        return (f"canary {what} {_ms(canary)} > {ratio:g} x stable's {_ms(stable)} "
                f"and > floor {_ms(floor)}")
    return None


def decide(
    stable: StageFigures,
    canary: StageFigures,
    slo: Slo,
    *,
    held_s: float = 0.0,
    auto_promote: bool = False,
    step_hold_s: float = 120.0,
) -> Decision:
    """`held_s`: how long the current step has been held; advance needs auto-promotion and
    `step_hold_s` held with healthy figures."""
    figures = {"stable": stable, "canary": canary}
    if canary.requests < slo.min_requests:
        return Decision("hold", [f"{canary.requests} canary request(s) in the window, fewer than "
                                 f"min_requests {slo.min_requests}: no verdict"], figures)
    bad: list[str] = []
    c_ratio = canary.error_ratio or 0.0
    s_ratio = stable.error_ratio or 0.0
    if c_ratio > s_ratio + slo.error_ratio_margin:
        bad.append(f"canary error ratio {c_ratio * 100:.1f}% > stable's {s_ratio * 100:.1f}% "
                   f"+ margin {slo.error_ratio_margin * 100:.1f}%")
    c_client, s_client = canary.client_error_ratio or 0.0, stable.client_error_ratio or 0.0
    if c_client > s_client + slo.error_ratio_margin:
        bad.append(f"canary client error (4xx) ratio {c_client * 100:.1f}% > stable's "
                   f"{s_client * 100:.1f}% + margin {slo.error_ratio_margin * 100:.1f}%")
    for reason in (
        _slower("TTFT p99", canary.ttft_p99_s, stable.ttft_p99_s, slo.ttft_p99_ratio, slo.latency_floor_s),
        _slower("e2e p95", canary.e2e_p95_s, stable.e2e_p95_s, slo.e2e_p95_ratio, slo.latency_floor_s),
    ):
        if reason:
            bad.append(reason)
    if bad:
        return Decision("rollback", bad, figures)
    healthy = "canary within the SLO of stable"
    if not auto_promote:
        return Decision("hold", [f"{healthy}; auto_promote is off: `installer release promote` advances"], figures)
    if held_s < step_hold_s:
        return Decision("hold", [f"{healthy}; step held {held_s:.0f} s of step_hold_s {step_hold_s:.0f} s"], figures)
    return Decision("advance", [f"{healthy} for {held_s:.0f} s (step_hold_s {step_hold_s:.0f} s)"], figures)
