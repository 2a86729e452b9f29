"""Columns from the hosts' own records (release.json, over SSH) against the control machine's
state.json: the revision and release each host runs, and drift between the two."""

from collections.abc import Sequence

from installer.day2 import records
from installer.status.model import Column, Context, Row


class ReleaseCollector:
    columns: Sequence[Column] = (
        Column("revision", "rev"),
        Column("host_release", "release on host"),
        Column("drift", "drift"),
    )

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        by_host = {rec.host: rec for rec in records.read(ctx.inventory, ctx.timeout_s)}
        for row in rows:
            rec = by_host.get(row.host)
            if rec is None:
                continue
            row.values["revision"] = rec.on_host
            row.values["host_release"] = rec.release_id or None
            row.values["drift"] = rec.drift
            if rec.error:
                row.problems.append(f"release record unreadable: {rec.error}")
