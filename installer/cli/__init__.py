"""The `installer` command: a thin typer layer over the library.

Each command group lives in its own module and registers itself on `app` (cli/root.py); this
module wires them and turns InstallerError into one red line and exit code 1.
"""

import sys

from installer.base.errors import InstallerError
from installer.cli.root import app, err_console

__all__ = ["app", "main"]


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    from installer.cli import (  # noqa: F401
        audit,
        bench,
        bundle,
        day2,
        deploy,
        gpu,
        keys,
        lab,
        release,
        state,
        status,
        terraform,
        tls,
        usage,
        verify,
    )


def main() -> None:
    _register()
    try:
        app()
    except InstallerError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        for line in exc.details:
            err_console.print(f"  {line}", highlight=False, markup=False)
        sys.exit(1)
