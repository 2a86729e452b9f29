"""The status table's shape: rows per (host, engine), columns declared by collectors."""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from installer.inventory import Host, Inventory
from installer.inventory.topology import serving_hosts


@dataclass(frozen=True)
class Column:
    key: str  # the JSON key
    header: str  # the table header
    # Turns the value into table text; None always shows as "-".
    fmt: Callable[[Any], str] = str
    # In the default table, which keeps to what users look at first and fits 100 columns; every
    # column shows with `--wide`, and in the JSON.
    brief: bool = False


@dataclass
class Row:
    host: str
    address: str
    engine: str
    values: dict[str, Any] = field(default_factory=dict)
    # Why a collector could not fill its columns for this row (shown under the table).
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    """What collectors may read. prometheus_url is None when no monitoring host is known.
    timeout_s (`installer status --timeout`) bounds every host access a collector makes: each
    gateway's /readyz, each SSH command through installer/hosts/remote.py (connecting included:
    the command is killed at its deadline, whatever ssh's own ConnectTimeout) and each Prometheus
    query, so an unreachable or silent host costs a problem line, never a hang."""

    inventory: Inventory
    prometheus_url: str | None
    timeout_s: float = 5.0


class Collector(Protocol):
    columns: Sequence[Column]

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        """Fill this collector's columns in every row; record what failed in row.problems."""


@dataclass
class StatusReport:
    deployment: str
    prometheus_url: str | None
    columns: list[Column]
    rows: list[Row]
    taken_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "prometheus": self.prometheus_url,
            "taken_at": self.taken_at,
            "rows": [
                {"host": r.host, "address": r.address, "engine": r.engine,
                 **{c.key: r.values.get(c.key) for c in self.columns}, "problems": r.problems}
                for r in self.rows
            ],
        }

    def _shown(self, wide: bool) -> list[Column]:
        return [c for c in self.columns if wide or c.brief]

    def headers(self, wide: bool = True) -> list[str]:
        # An engine's name begins with its host's (plan._names): the default table names it once.
        return [*(["host", "engine"] if wide else ["engine"]), *[c.header for c in self._shown(wide)]]

    def table_rows(self, wide: bool = True) -> list[list[str]]:
        out = []
        for r in self.rows:
            cells = [r.host, r.engine] if wide else [r.engine]
            for c in self._shown(wide):
                value = r.values.get(c.key)
                cells.append("-" if value is None else c.fmt(value))
            out.append(cells)
        return out


def collect(
    ctx: Context, collectors: Sequence[Collector], engines: Callable[[Host], Sequence[str]]
) -> StatusReport:
    """One row per serving host and each of its engines (engines(host) names them)."""
    inv = ctx.inventory
    rows = [Row(h.name, h.address, engine) for h in serving_hosts(inv) for engine in engines(h)]
    for collector in collectors:
        collector.collect(ctx, rows)
    columns = [c for collector in collectors for c in collector.columns]
    return StatusReport(ctx.inventory.deployment, ctx.prometheus_url, columns, rows, time.time())
