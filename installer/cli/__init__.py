"""The `installer` command: a thin typer layer over the library.

Each command group lives in its own module and registers itself on `app`; this module only
wires them and turns InstallerError into one red line and exit code 1.
"""

import sys

import typer
from rich.console import Console

from installer.errors import InstallerError

app = typer.Typer(
    name="installer",
    help="Install and run LLMs on your own hosts: inventory -> bundle -> Ansible -> vLLM.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True, soft_wrap=True)  # an error line must stay greppable


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    from installer.cli import bench, bundle, day2, deploy, gpu, keys, lab, status, terraform, tls  # noqa: F401


def main() -> None:
    _register()
    try:
        app()
    except InstallerError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        for line in exc.details:
            err_console.print(f"  {line}", highlight=False, markup=False)
        sys.exit(1)
