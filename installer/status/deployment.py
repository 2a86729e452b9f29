"""Columns from what the control machine knows: the model, and the release the last
successful `installer up` of this deployment installed."""

from collections.abc import Sequence

from installer.base.runlog import summaries
from installer.status.model import Column, Context, Row


def last_release(deployment: str) -> str | None:
    """release_id of the newest successful `up` run of this deployment, from its summary.json."""
    return next((s.get("release_id") for s in summaries("up", deployment) if s.get("success")), None)


class DeploymentCollector:
    columns: Sequence[Column] = (Column("model", "model"), Column("release", "release", brief=True))

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        release = last_release(ctx.inventory.deployment)
        for row in rows:
            row.values["model"] = ctx.inventory.model.served_name
            row.values["release"] = release
