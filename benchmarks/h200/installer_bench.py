"""`installer bench` on the GPU machine: the same typer command, without the other commands.

usage: python3 benchmarks/h200/installer_bench.py bench --base-url URL --model NAME [options]

`installer` registers every command group at start-up, and the deploy/lab groups import
Fabric and ansible-runner, which the GPU machine lacks (and the benchmark does not need).
This registers only installer/cli/bench.py's command on the same typer app, so the options,
the load generator and the report are exactly `installer bench`'s.
"""

import installer.cli.bench  # noqa: F401  (registers the `bench` command on the app)
from installer.cli import app


@app.callback()
def _installer() -> None:
    """A group callback keeps `bench` a subcommand, as in the full CLI."""


if __name__ == "__main__":
    app(prog_name="installer")
