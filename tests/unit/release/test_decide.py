"""The decision rule on recorded /metrics series: two gateways scraped at a window's start and end."""

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from installer.release import metrics
from installer.release.decide import decide

DATA = Path(__file__).parent / "data"
MODEL = "tiny-llama"


@dataclass(frozen=True)
class Slo:  # the design's defaults (ReleaseSettings().slo)
    window_s: int = 120
    min_requests: int = 20
    error_ratio_margin: float = 0.02
    ttft_p99_ratio: float = 1.5
    e2e_p95_ratio: float = 1.5
    latency_floor_s: float = 0.8


def _window(name: str) -> metrics.Samples:
    def scrape(when: str) -> dict[str, metrics.Samples]:
        return {gw: metrics.parse((DATA / f"{name}-{when}-{gw}.txt").read_text()) for gw in ("gw1", "gw2")}

    return metrics.window(scrape("before"), scrape("after"))


def _figures(name: str) -> tuple[metrics.StageFigures, metrics.StageFigures]:
    w = _window(name)
    return metrics.figures(w, MODEL, "stable"), metrics.figures(w, MODEL, "canary")


def test_canary_with_a_tenth_of_errors_is_rolled_back_with_its_figures() -> None:
    stable, canary = _figures("errors")
    # Only the window counts: both gateways had errors before it.
    assert (stable.requests, stable.errors) == (400, 0)
    assert (canary.requests, canary.errors) == (100, 10)
    d = decide(stable, canary, Slo())
    assert d.action == "rollback"
    assert any("error ratio 10.0% > stable's 0.0%" in r for r in d.reasons), d.reasons
    assert d.figures == {"stable": stable, "canary": canary}
    assert "canary: 100 req, errors 10" in d.describe()


def test_slow_canary_is_rolled_back_on_latency() -> None:
    stable, canary = _figures("slow")
    assert stable.e2e_p95_s is not None and stable.e2e_p95_s < 0.5
    assert canary.e2e_p95_s is not None and canary.e2e_p95_s > 2.0
    d = decide(stable, canary, Slo())
    assert d.action == "rollback"
    assert any(r.startswith("canary e2e p95") for r in d.reasons), d.reasons
    assert any(r.startswith("canary TTFT p99") for r in d.reasons), d.reasons
    assert canary.error_ratio == 0


def test_too_few_canary_requests_is_no_verdict_even_when_they_failed() -> None:
    stable, canary = _figures("few")
    assert canary.requests == 10
    d = decide(stable, canary, Slo())
    assert d.action == "hold"
    assert "fewer than min_requests 20" in d.reasons[0]


def test_healthy_canary_advances_only_with_auto_promote_after_the_hold() -> None:
    stable, canary = _figures("healthy")
    # gw2 restarted inside the window: its later counts are its whole increase.
    assert canary.requests == 102 and canary.bad_output == 2
    assert decide(stable, canary, Slo()).action == "hold"
    assert "auto_promote is off" in decide(stable, canary, Slo()).reasons[0]
    held = decide(stable, canary, Slo(), auto_promote=True, held_s=60, step_hold_s=120)
    assert held.action == "hold" and "held 60 s" in held.reasons[0]
    assert decide(stable, canary, Slo(), auto_promote=True, held_s=120, step_hold_s=120).action == "advance"


def test_latency_under_the_floor_is_never_a_reason() -> None:
    fast = metrics.StageFigures("stable", 100, 0, 0, 0.01, 0.02)
    slower = metrics.StageFigures("canary", 100, 0, 0, 0.5, 0.7)  # 35x stable, under 0.8 s
    assert decide(fast, slower, Slo()).action == "hold"
    no_stable = metrics.StageFigures("stable", 0, 0, 0, None, None)
    d = decide(no_stable, metrics.StageFigures("canary", 100, 0, 0, 0.2, 1.5), Slo())
    assert d.action == "rollback" and "stable has no figure" in d.reasons[0]


def test_error_margin_is_over_stable() -> None:
    stable = metrics.StageFigures("stable", 100, 5, 0, 0.1, 0.3)
    assert decide(stable, metrics.StageFigures("canary", 100, 6, 0, 0.1, 0.3), Slo()).action == "hold"
    assert decide(stable, metrics.StageFigures("canary", 100, 6, 2, 0.1, 0.3), Slo()).action == "rollback"


@pytest.mark.parametrize(
    ("buckets", "q", "want"),
    [
        # Prometheus' own cases (promql/quantile.go): linear inside the bucket holding the rank
        ([(0.1, 0), (0.5, 50), (1.0, 100), (float("inf"), 100)], 0.5, 0.5),
        ([(0.1, 0), (0.5, 50), (1.0, 100), (float("inf"), 100)], 0.75, 0.75),
        ([(0.1, 10), (float("inf"), 10)], 0.5, 0.05),  # first bucket: from 0
        ([(0.1, 0), (1.0, 5), (float("inf"), 100)], 0.99, 1.0),  # in +Inf: the highest bound
        ([(0.1, 0), (float("inf"), 0)], 0.5, None),  # nothing counted
    ],
)
def test_quantile_as_prometheus_computes_it(buckets: list[tuple[float, float]], q: float, want: float | None) -> None:
    got = metrics.quantile(q, buckets)
    assert got == (None if want is None else pytest.approx(want))


def test_parse_keeps_only_stage_series_and_no_creation_times() -> None:
    samples = metrics.parse((DATA / "errors-after-gw1.txt").read_text())
    names = {name for name, _ in samples}
    assert metrics.REQUESTS in names and f"{metrics.TTFT}_bucket" in names
    assert not any(n.endswith("_created") or n.startswith("pli_gateway_requests") for n in names)


def test_a_canary_refusing_more_requests_than_stable_is_rolled_back() -> None:
    stable, canary = _figures("client-errors")  # the healthy series with 4xx answers added
    assert canary.client_errors >= 20 and canary.errors == 0
    assert stable.errors > 0 and stable.client_errors < canary.client_errors
    d = decide(stable, canary, Slo())
    assert d.action == "rollback"
    assert any(r.startswith("canary client error (4xx) ratio") for r in d.reasons), d.reasons
    assert f"client errors {canary.client_errors}" in d.describe()
    # The same share of 4xx on stable: the callers' fault, not the canary's.
    assert canary.client_error_ratio is not None
    alike = replace(stable, client_errors=round(stable.requests * canary.client_error_ratio))
    assert decide(alike, canary, Slo()).action == "hold"
