"""A stage's figures over a window, from two scrapes of the gateways' /metrics.

The gateways count every attempt per (model, stage): `pli_gateway_stage_requests_total` by
outcome, and the TTFT and duration histograms. A window is the difference between a scrape at
its start and one at its end, gateway by gateway (a gateway that restarted in between starts its
counters again from zero, so its later values are the whole increase, all of them at once: as
Prometheus' `increase` reads a reset, but per gateway, so a histogram's buckets stay monotone),
then summed over the gateways. Quantiles come from the bucket increases the way
Prometheus' `histogram_quantile` computes them: linear interpolation inside the bucket that
holds the rank.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

REQUESTS = "pli_gateway_stage_requests_total"
TTFT = "pli_gateway_stage_ttft_seconds"
DURATION = "pli_gateway_stage_request_duration_seconds"
_PREFIX = "pli_gateway_stage_"

# (sample name, sorted labels) -> value
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
Samples = dict[SeriesKey, float]


def parse(text: str) -> Samples:
    """The stage series of one gateway's /metrics text (everything else is left out)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(_PREFIX):
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue  # creation timestamps, not counts
            samples[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return samples


def restarted(before: Samples, after: Samples) -> bool:
    """Whether the gateway restarted between the scrapes: a series went down or vanished."""
    return any(key not in after or after[key] < old for key, old in before.items())


def increase(before: Samples | None, after: Samples) -> Samples:
    """What each series grew by from `before` to `after` (a series new in `after` grew by its
    whole later value). When the gateway restarted in between, every series grew by its whole
    later value: one series that went down says they all started again from zero, and a series
    taken whole beside one taken as a difference would make a histogram's buckets non-monotone."""
    if before is None or restarted(before, after):
        return dict(after)
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def window(before: Mapping[str, Samples], after: Mapping[str, Samples]) -> Samples:
    """The increase over a window, summed over the gateways scraped at both ends (one missed at
    the start would count its whole life as the window)."""
    total: Samples = {}
    for gateway, now in after.items():
        if gateway not in before:
            continue
        for key, grew in increase(before[gateway], now).items():
            total[key] = total.get(key, 0.0) + grew
    return total


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over (upper bound, cumulative count) pairs; None when the
    histogram counted nothing (Prometheus says NaN)."""
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    total = ordered[-1][1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(ordered) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]  # in the +Inf bucket: the highest finite bound
    upper, count = ordered[index]
    lower, below = (0.0, 0.0) if index == 0 else ordered[index - 1]
    if index == 0 and upper <= 0:
        return upper
    if count == below:
        return upper
    return lower + (upper - lower) * (rank - below) / (count - below)


@dataclass(frozen=True)
class StageFigures:
    """One stage of one model over a window."""

    stage: str
    requests: int  # attempts, whatever their outcome
    errors: int
    bad_output: int
    ttft_p99_s: float | None
    e2e_p95_s: float | None
    client_errors: int = 0  # 4xx answers: relayed, judged by their share against stable's

    @property
    def error_ratio(self) -> float | None:
        """Failed attempts (errors and bad outputs) per attempt; None with no attempt."""
        return (self.errors + self.bad_output) / self.requests if self.requests else None

    @property
    def client_error_ratio(self) -> float | None:
        """4xx answers per attempt; None with no attempt."""
        return self.client_errors / self.requests if self.requests else None

    def describe(self) -> str:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1000:.0f} ms"

        ratio = "-" if self.error_ratio is None else f"{self.error_ratio * 100:.1f}%"
        return (f"{self.stage}: {self.requests} req, errors {self.errors}, bad output {self.bad_output} "
                f"({ratio}), client errors {self.client_errors}, "
                f"TTFT p99 {ms(self.ttft_p99_s)}, e2e p95 {ms(self.e2e_p95_s)}")


def _buckets(samples: Samples, histogram: str, model: str, stage: str) -> list[tuple[float, float]]:
    by_le: dict[float, float] = {}
    for (name, labels), value in samples.items():
        if name != f"{histogram}_bucket":
            continue
        d = dict(labels)
        if d.get("model") == model and d.get("stage") == stage:
            le = float(d["le"])
            by_le[le] = by_le.get(le, 0.0) + value
    return sorted(by_le.items())


def figures(samples: Samples, model: str, stage: str) -> StageFigures:
    """A stage's figures from a window's samples (`window`); `model` is the served name."""
    outcomes: dict[str, float] = {}
    for (name, labels), value in samples.items():
        d = dict(labels)
        if name == REQUESTS and d.get("model") == model and d.get("stage") == stage:
            outcome = d.get("outcome", "")
            outcomes[outcome] = outcomes.get(outcome, 0.0) + value
    return StageFigures(
        stage=stage,
        requests=round(sum(outcomes.values())),
        errors=round(outcomes.get("error", 0.0)),
        bad_output=round(outcomes.get("bad_output", 0.0)),
        ttft_p99_s=quantile(0.99, _buckets(samples, TTFT, model, stage)),
        e2e_p95_s=quantile(0.95, _buckets(samples, DURATION, model, stage)),
        client_errors=round(outcomes.get("client_error", 0.0)),
    )
