"""`installer lab up|status|down`: Debian 12/13 hosts on this machine, as systemd-nspawn containers."""

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from installer import lab
from installer.cli.root import app
from installer.cli.ui import console

lab_app = typer.Typer(
    help="A local lab: Debian 12/13 hosts in containers, reachable only over SSH, no internet.",
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")

NameOption = Annotated[
    str, typer.Option("--name", help="Lab name: 1-6 lowercase letters/digits, from a letter.")
]


@lab_app.command("up")
def up_cmd(
    hosts: Annotated[int, typer.Option("--hosts", "-n", help="Number of hosts to boot.")] = 2,
    name: NameOption = lab.DEFAULT_NAME,
    subnet: Annotated[
        str, typer.Option(help="Private IPv4 subnet; .1 is this machine, hosts from .11.")
    ] = lab.DEFAULT_SUBNET,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory", "-i", help="Inventory file to write (default: inventory/lab.yml)."
        ),
    ] = None,
    releases: Annotated[
        str,
        typer.Option(
            "--releases",
            help="OS release of the hosts: one for all (debian-12 or debian-13), or one per host "
            "in host order, comma-separated (debian-12,debian-13: a mixed fleet).",
        ),
    ] = "debian-12",
) -> None:
    """Boot HOSTS Debian hosts and write an inventory for them (reuses a running lab)."""
    start = time.monotonic()
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20),
        TimeElapsedColumn(), console=console, transient=False,
    ) as progress:  # fmt: skip
        info = lab.up(
            hosts,
            name=name,
            subnet=subnet,
            inventory_path=inventory,
            releases=[r.strip() for r in releases.split(",")],
            progress=progress,
        )
    table = Table(
        title=f'lab "{info.name}"', caption=f"{info.subnet}, up in {time.monotonic() - start:.0f} s"
    )
    table.add_column("host")
    table.add_column("address")
    table.add_column("release")
    for host in info.hosts:
        table.add_row(host.name, host.address, host.release)
    console.print(table)
    console.print(f"inventory: {info.inventory_path}")
    first = info.hosts[0]
    console.print(
        f"try: ssh -i {info.private_key} -o UserKnownHostsFile={info.known_hosts} "
        f"root@{first.address}",
        soft_wrap=True,
    )


@lab_app.command("status")
def status_cmd(name: NameOption = lab.DEFAULT_NAME) -> None:
    """Show each host: its nspawn PID, whether SSH answers, and what systemd reports."""
    rows = lab.status(name)
    if not rows:
        console.print(f'no lab "{name}" here (start one with `installer lab up --name {name}`)')
        return
    table = Table(title=f'lab "{name}"')
    for column in ("host", "address", "pid", "process", "ssh", "systemd"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            row.address,
            str(row.pid or "-"),
            "[green]alive[/]" if row.alive else "[red]gone[/]",
            "[green]ok[/]" if row.ssh_ok else "[red]no[/]",
            _colour_state(row.system_state),
        )
    console.print(table)
    if not all(r.alive and r.ssh_ok for r in rows):
        raise typer.Exit(1)


def _colour_state(state: str) -> str:
    if state == "running":
        return f"[green]{state}[/]"
    return f"[yellow]{state}[/]" if state else "-"


@lab_app.command("down")
def down_cmd(name: NameOption = lab.DEFAULT_NAME) -> None:
    """Power every host off cleanly, then remove the lab's network and host filesystems."""
    start = time.monotonic()
    with console.status(f'taking lab "{name}" down (clean shutdown of every host)'):
        times = lab.down(name)
    console.print(f'lab "{name}" is down ({time.monotonic() - start:.0f} s); nothing left behind')
    console.print(f"where the time went: {times.describe()}")
