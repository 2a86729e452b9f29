"""`installer status`: per host and engine, readiness now and what Prometheus saw lately."""

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.text import Text

from installer.cli.root import app
from installer.inventory import load_inventory
from installer.status.model import StatusReport
from installer.status.report import report as status_report
from installer.ui import console, table


def _render(report: StatusReport) -> Group:
    stamp = time.strftime("%H:%M:%S", time.localtime(report.taken_at))
    title = f"deployment {report.deployment} — {stamp}, Prometheus {report.prometheus_url or 'none'}"
    parts: list = [table(title, ["host", "engine", *[c.header for c in report.columns]], report.table_rows())]
    for row in report.rows:
        for problem in dict.fromkeys(row.problems):
            parts.append(Text(f"  {row.host}/{row.engine}: {problem}", style="yellow"))
    return Group(*parts)


@app.command("status")
def status_cmd(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="Inventory file of the deployment.")],
    prometheus: Annotated[
        str | None,
        typer.Option(help="Prometheus base URL; default: the first monitoring host's (monitoring.prometheus_port)."),
    ] = None,
    watch: Annotated[
        float | None, typer.Option(help="Refresh every this many seconds until Ctrl-C.", min=1)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each gateway and query.", min=0.1)] = 5.0,
) -> None:
    """Show each host's engines: ready, model, release, traffic, latency, KV cache, GPU memory."""
    inv = load_inventory(inventory)
    if as_json:
        if watch:
            raise typer.BadParameter("--watch and --json do not go together; run --json in a loop instead")
        print(json.dumps(status_report(inv, prometheus, timeout).to_json(), indent=1))
        return
    if not watch:
        console.print(_render(status_report(inv, prometheus, timeout)))
        return
    with Live(_render(status_report(inv, prometheus, timeout)), console=console, screen=False) as live:
        try:
            while True:
                time.sleep(watch)
                live.update(_render(status_report(inv, prometheus, timeout)))
        except KeyboardInterrupt:
            pass
