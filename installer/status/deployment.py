"""Columns from what the control machine knows: the model, and the release the last
successful `installer up` of this deployment installed."""

import json
from collections.abc import Sequence

from installer.paths import state_dir
from installer.status.model import Column, Context, Row


def last_release(deployment: str) -> str | None:
    """release_id of the newest successful `up` run of this deployment, from its summary.json."""
    runs = sorted((state_dir() / "runs").glob(f"*-up-{deployment}*"), key=lambda p: p.stat().st_mtime)
    for run in reversed(runs):
        try:
            summary = json.loads((run / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if summary.get("deployment") == deployment and summary.get("success"):
            return summary.get("release_id")
    return None


class DeploymentCollector:
    columns: Sequence[Column] = (Column("model", "model"), Column("release", "release", brief=True))

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        release = last_release(ctx.inventory.deployment)
        for row in rows:
            row.values["model"] = ctx.inventory.model.served_name
            row.values["release"] = release
