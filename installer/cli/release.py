"""`installer release start|promote|abort|watch|status`: gray releases of one model."""

from pathlib import Path
from typing import Annotated

import typer

from installer.cli.root import InventoryOpt, app
from installer.cli.ui import RichReporter, console, table
from installer.inventory import load_inventory
from installer.release import abort, promote, report, start, watch
from installer.release import collector as _collector  # noqa: F401  (its import adds `installer status` columns)
from installer.release.outcome import Outcome

release_app = typer.Typer(
    help="Gray releases: a model's new revision beside the stable one, weighted, judged, promoted or aborted.",
    no_args_is_help=True,
)
app.add_typer(release_app, name="release")

ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="The model's `name` in the inventory (`main` for `model:`).")
]
DrainOpt = Annotated[
    float, typer.Option("--drain-timeout", help="Seconds to wait for requests on engines taken out of rotation.")
]


def _reporter(inventory: Path) -> RichReporter:
    return RichReporter([h.name for h in load_inventory(inventory).hosts])


def _print(title: str, out: Outcome) -> None:
    console.print(table(title, ["step", "result", "seconds", "detail"], [[*r[:3], r[3][:100]] for r in out.rows]))
    console.print(f"run log: {out.run_dir}")
    if out.ended:
        console.print(f"[green]release of {out.model} {out.ended}[/]")
    elif out.weight is not None:
        console.print(f"canary of {out.model} at [bold]{out.weight}%[/]")
    if out.verdict:
        console.print(f"the release controller's verdict: [bold]{out.verdict}[/]")


@release_app.command("start")
def start_cmd(
    inventory: InventoryOpt,
    model: ModelOpt,
    bundle: Annotated[Path | None, typer.Option(help="The bundle (default: build from the checkout).")] = None,
    trusted_key: Annotated[list[Path] | None, typer.Option("--trusted-key", show_default=False)] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Accept an unsigned --bundle. Unsafe.")] = False,
    drain_timeout: DrainOpt = 120,
) -> None:
    """Start the inventory's entry of MODEL beside the stable one; it takes the first step's share, and the
    release controller on the deployment steps it from there (this returns at once)."""
    out = start.start(inventory, _reporter(inventory), model=model, bundle_path=bundle,
                      trusted_keys=tuple(trusted_key or ()), insecure=insecure, drain_timeout_s=drain_timeout)
    _print(f"release start of {model}", out)


@release_app.command("promote")
def promote_cmd(inventory: InventoryOpt, model: ModelOpt, drain_timeout: DrainOpt = 120) -> None:
    """The next step's share (through the release controller, refused if it rolled the canary back); at 100% the
    stable engines take the canary's spec and the canary is retired."""
    out = promote.promote(inventory, _reporter(inventory), model=model, drain_timeout_s=drain_timeout)
    _print(f"release promote of {model}", out)


@release_app.command("abort")
def abort_cmd(inventory: InventoryOpt, model: ModelOpt, drain_timeout: DrainOpt = 120) -> None:
    """Back to 0% at once (the release controller stopped first); the canary is stopped and removed once no
    request is on it."""
    out = abort.abort(inventory, _reporter(inventory), model=model, drain_timeout_s=drain_timeout)
    _print(f"release abort of {model}", out)


@release_app.command("watch")
def watch_cmd(
    inventory: InventoryOpt,
    model: ModelOpt,
    poll: Annotated[float, typer.Option("--poll", min=0.5, help="Seconds between looks.")] = 5,
    for_s: Annotated[float | None, typer.Option("--for", help="Stop after this many seconds.")] = None,
) -> None:
    """The release controller's decisions as it takes them, until its verdict is in (it decides
    on the deployment: stopping watch changes nothing)."""
    out = watch.run(inventory, _reporter(inventory), model=model, poll_s=poll, for_s=for_s)
    _print(f"release watch of {model}", out)


@release_app.command("status")
def status_cmd(
    inventory: InventoryOpt,
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model (default: the one in release).")] = None,
) -> None:
    """Both stages of the release with their share, engines and SLO figures."""
    got = report.status(inventory, model)
    if got.release is None:
        console.print("no gray release in progress")
        return
    r = got.release
    console.print(table(f"release of {r.model} ({r.served_name}): step {r.step + 1} of {len(r.steps)}",
                        report.COLUMNS, got.rows))
    for host, problem in got.problems.items():
        console.print(f"[yellow]{host}: {problem}[/]")
    if got.decision is not None:
        console.print(f"since the gateways started: {got.decision.action}: {'; '.join(got.decision.reasons)}")
    if got.controller is not None:
        last = got.controller.get("last")
        console.print(f"release controller: {got.controller.get('verdict')}, canary at {got.controller.get('weight')}%"
                      + (f"; last decision: {watch.describe(last)}" if last else ""))
