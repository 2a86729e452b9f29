"""`installer status` during a gray release: a row for each canary engine, and for the released
model's engines their stage, its share and its figures as the gateways counted them since they
started (error ratio, e2e p95). Registered at import in installer.status.COLLECTORS, ahead of
the others, so the readiness and Prometheus columns fill the canary rows too."""

from collections.abc import Sequence

from installer import status
from installer.release import metrics, scrape, spec, state
from installer.release.metrics import StageFigures
from installer.status.model import Column, Context, Row


def _pct(v: float) -> str:
    return f"{v * 100:.1f}%"


def _ms(v: float) -> str:
    return f"{v * 1000:.0f} ms"


class StageCollector:
    columns: Sequence[Column] = (
        Column("stage", "stage", brief=True),
        Column("stage_error_ratio", "stage errors", _pct),
        Column("stage_e2e_p95_s", "stage e2e p95", _ms),
    )

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        deployment = ctx.inventory.deployment
        release = state.current(deployment)
        if release is None:
            return
        s = spec.sides(deployment, release)
        dp = s.with_canary()
        addresses = {r.host: r.address for r in rows}
        for host, names in spec.engines_of(dp, release.model, "canary").items():
            known = {r.engine for r in rows}
            rows += [Row(host, addresses.get(host, ""), n) for n in names if n not in known and host in addresses]
        got = scrape.scrape(s.stable_inv, 0, timeout_s=ctx.timeout_s)
        since_start = metrics.window({g: {} for g in got.gateways}, got.gateways)
        share = release.shares
        for stage in ("stable", "canary"):
            f: StageFigures = metrics.figures(since_start, release.served_name, stage)
            of_stage = {n for ns in spec.engines_of(dp, release.model, stage).values() for n in ns}
            for row in rows:
                if row.engine in of_stage:
                    row.values["stage"] = f"{stage} {share[stage]}%"
                    row.values["stage_error_ratio"] = f.error_ratio
                    row.values["stage_e2e_p95_s"] = f.e2e_p95_s
                    row.problems += [f"{h}: {p}" for h, p in got.problems.items()]


if not any(isinstance(c, StageCollector) for c in status.COLLECTORS):
    status.COLLECTORS.insert(0, StageCollector())
