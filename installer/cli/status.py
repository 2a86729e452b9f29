"""`installer status`: per host and engine, readiness now and what Prometheus saw lately."""

import json
import time
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from installer.cli.root import InventoryOpt, app
from installer.cli.ui import console, table
from installer.inventory import load_inventory
from installer.status.model import StatusReport
from installer.status.report import report as status_report


def _table(report: StatusReport, wide: bool) -> Table:
    stamp = time.strftime("%H:%M:%S", time.localtime(report.taken_at))
    title = f"deployment {report.deployment} — {stamp}, Prometheus {report.prometheus_url or 'none'}"
    return table(title, report.headers(wide), report.table_rows(wide), compact=True)


def _render(report: StatusReport, wide: bool) -> Group:
    parts: list = [_table(report, wide)]
    for row in report.rows:
        for problem in dict.fromkeys(row.problems):
            parts.append(Text(f"  {row.host}/{row.engine}: {problem}", style="yellow"))
    return Group(*parts)


def _print(view: Group, wide: bool) -> None:
    if not wide or console.is_terminal:
        console.print(view)
        return
    # Into a pipe or a file, --wide keeps every column whole however wide it gets (`| less -S`).
    width = console.width
    console.width = max(width, console.measure(view, options=console.options.update_width(10_000)).maximum)
    try:
        console.print(view)
    finally:
        console.width = width


@app.command("status")
def status_cmd(
    inventory: InventoryOpt,
    prometheus: Annotated[
        str | None,
        typer.Option(help="Prometheus base URL; default: the first monitoring host's (monitoring.prometheus_port)."),
    ] = None,
    watch: Annotated[
        float | None, typer.Option(help="Refresh every this many seconds until Ctrl-C.", min=1)
    ] = None,
    wide: Annotated[
        bool,
        typer.Option("--wide", help="Show every column; the default keeps to those looked at first, in 100 columns."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document, every column, instead of a table.")
    ] = False,
    timeout: Annotated[float, typer.Option(
        help="Seconds to wait for each host access (a gateway's /readyz, an SSH command) and each Prometheus query.",
        min=0.1,
    )] = 5.0,
) -> None:
    """Show each host's engines: release, ready, traffic, TTFT, GPU memory (--wide: every column)."""
    inv = load_inventory(inventory)
    if as_json:
        if watch:
            raise typer.BadParameter("--watch and --json do not go together; run --json in a loop instead")
        print(json.dumps(status_report(inv, prometheus, timeout).to_json(), indent=1))
        return
    if not watch:
        _print(_render(status_report(inv, prometheus, timeout), wide), wide)
        return
    with Live(_render(status_report(inv, prometheus, timeout), wide), console=console, screen=False) as live:
        try:
            while True:
                time.sleep(watch)
                live.update(_render(status_report(inv, prometheus, timeout), wide))
        except KeyboardInterrupt:
            pass
