"""`installer release status`: the release under way, its two stages with their share, engines
and SLO figures (counted by the gateways since they started: one scrape, no waiting), what the
decision rule would say of them, and the release controller's own state (its verdict and last
decision, which are what moves the weights)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer.inventory import load_inventory
from installer.release import controller, metrics, scrape, spec, state
from installer.release.decide import Decision, decide
from installer.release.state import Release, ReleaseError


@dataclass
class ReleaseStatus:
    release: Release | None
    rows: list[list[str]] = field(default_factory=list)  # stage, share, revision, engines, figures...
    decision: Decision | None = None
    problems: dict[str, str] = field(default_factory=dict)  # gateways (or the controller) that did not answer
    controller: dict[str, Any] | None = None  # its state of this release, as release_admin shows it


COLUMNS = ["stage", "share", "revision", "engines", "requests", "error ratio", "TTFT p99", "e2e p95"]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms"


def status(inventory_path: Path, model: str | None = None) -> ReleaseStatus:
    deployment = load_inventory(inventory_path).deployment
    release = state.current(deployment)
    if release is None:
        return ReleaseStatus(None)
    if model is not None:
        state.require(deployment, model)  # another model's release is named, not shown as this one
    s = spec.sides(deployment, release)
    got = scrape.scrape(s.stable_inv, 0)
    since_start = metrics.window({g: {} for g in got.gateways}, got.gateways)
    dp = s.with_canary()
    out = ReleaseStatus(release, problems=got.problems)
    figures = {}
    for stage, rev in (("stable", s.stable.number), ("canary", s.canary.number)):
        share = release.shares[stage]
        f = figures[stage] = metrics.figures(since_start, release.served_name, stage)
        engines = ", ".join(n for names in spec.engines_of(dp, release.model, stage).values() for n in names)
        ratio = "-" if f.error_ratio is None else f"{f.error_ratio * 100:.1f}%"
        out.rows.append([stage, f"{share}%", str(rev), engines or "-", str(f.requests), ratio,
                         _ms(f.ttft_p99_s), _ms(f.e2e_p95_s)])
    settings = s.canary_spec().release
    out.decision = decide(figures["stable"], figures["canary"], settings.slo,
                          auto_promote=settings.auto_promote, step_hold_s=settings.step_hold_s)
    if release.controller:
        try:
            st = controller.show(s.stable_inv).get("state") or {}
            out.controller = st if st.get("release") == release.controller else None
        except ReleaseError as exc:
            out.problems["release controller"] = str(exc)
    return out
