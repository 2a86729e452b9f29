"""Terminal output with rich: phases with timings, per-host progress, and summary tables."""

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

console = Console(highlight=False)
if not console.is_terminal:
    # Logs and CI capture: keep tables whole instead of wrapping them at 80 columns.
    console.width = max(console.width, 160)


class RichReporter:
    """Implements prepare.Reporter: one line per phase, live bars for pushes and Ansible tasks."""

    def __init__(self, hosts: list[str]) -> None:
        self._hosts = hosts
        self._progress: Progress | None = None
        self._rows: dict[str, TaskID] = {}
        self._counts: dict[str, dict[str, int]] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        console.print(f"[bold cyan]▶ {name}[/]")
        try:
            yield
        except BaseException:
            self._stop()
            console.print(f"[bold red]✗ {name}[/] failed after {time.monotonic() - start:.1f} s")
            raise
        self._stop()
        console.print(f"[green]✓ {name}[/] {time.monotonic() - start:.1f} s")

    def _stop(self) -> None:
        if self._progress:
            self._progress.stop()
            self._progress = None
            self._rows = {}

    def note(self, text: str) -> None:
        console.print(f"  {text}")

    def push_progress(self, host: str, sent: int, total: int) -> None:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("  {task.description:<12}"), BarColumn(), DownloadColumn(),
                TransferSpeedColumn(), console=console, transient=True,
            )
            self._progress.start()
        if host not in self._rows:
            self._rows[host] = self._progress.add_task(host, total=total or 1)
        self._progress.update(self._rows[host], completed=sent if total else 1, total=total or 1)

    def task(self, host: str, task: str, status: str) -> None:
        if self._progress is None:
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description:<12}"), TextColumn("{task.fields[counts]}"),
                TextColumn("[dim]{task.fields[last]}"), TimeElapsedColumn(), console=console, transient=True,
            )
            self._progress.start()
        if host not in self._rows:
            self._rows[host] = self._progress.add_task(host, total=None, counts="", last="")
            self._counts[host] = {"ok": 0, "changed": 0, "failed": 0}
        counts = self._counts[host]
        if status in counts:
            counts[status] += 1
        text = f"ok={counts['ok']} changed={counts['changed']} failed={counts['failed']}"
        self._progress.update(self._rows[host], counts=text, last=task[:60])


def table(title: str, columns: list[str], rows: list[list[str]], *, compact: bool = False) -> Table:
    """compact: no borders, two spaces between columns (kubectl's layout) instead of a box's three
    characters, for tables of many columns."""
    if compact:
        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 1, 0, 0))
    else:
        t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    return t
