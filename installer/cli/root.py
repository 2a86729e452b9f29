"""The root of the `installer` command: the typer app every command module registers on, the
options they share, the --state-dir option (installer.base.paths: `--state-dir`, or next to the
command's --inventory), `run_up`, which both `up` and `plan` (in check mode) print with, and
`audited`, which appends each run of a command that changes the deployment to its audit trail
(as it starts, and as it ends).

Command modules import this module and nothing else of installer.cli, so no command depends on
another one (pyproject.toml, [tool.importlinter]).
"""

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from installer.ansible.runner import strategy_env
from installer.base import paths
from installer.base.errors import AnsibleError
from installer.cli.ui import RichReporter, console, table
from installer.flows import deploy
from installer.hosts import prove
from installer.inventory import load_inventory
from installer.state import audit, deployment_lock

app = typer.Typer(
    name="installer",
    help="Install and run LLMs on your own hosts: inventory -> bundle -> Ansible -> vLLM.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True, soft_wrap=True)  # an error line must stay greppable
# The lab's --inventory is the file `lab up` writes, not a deployment's: the lab keeps its
# state where it is run (or in --state-dir).
_NOT_ANCHORED = ("lab",)
# The commands that change the deployment (its hosts, cloud resources, keys or trusted signers):
# every run is appended to the state's audit trail, failed ones too. `up --check` changes nothing.
# `lab up/down` make test machines, not a deployment; `ca export` and `releases` only read.
# `state export` copies every secret off the machine: who did it is recorded. `state import`
# appends its own entry to the trail it restored (installer/state_archive/restore.py).
AUDITED = ("up", "upgrade", "rollback", "down", "keys create", "keys revoke", "keys quota", "bundle keygen",
           "release start", "release promote", "release abort", "release watch", "state export")


def _anchor(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    if value:
        if not Path(value).is_file():
            # Before the command runs: nothing may be written into a state next to no inventory.
            raise typer.BadParameter(f"{value} is not a file; give the deployment's inventory YAML")
        paths.anchor_state_to(Path(value))
    return value


def _anchor_inventory_options(group: Any, ctx: typer.Context) -> None:
    """Every command's --inventory also says where that deployment's state is, so `up`, `keys`,
    `ca`, `status`, `upgrade`... given the same inventory share one state directory, and a
    command added later gets it without having to remember."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or name in _NOT_ANCHORED:
            continue
        if hasattr(command, "list_commands"):  # a command group (keys, ca, bundle...)
            _anchor_inventory_options(command, ctx)
            continue
        for param in command.params:
            if param.name == "inventory" and param.callback in (None, _anchor):
                param.callback = _anchor


@app.callback()
def _state_dir_option(
    ctx: typer.Context,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Where this deployment's state lives (keys, CA, revisions, runs, Terraform state). "
            "Default: $INSTALLER_STATE_DIR, else .installer/ next to the command's --inventory, "
            "else ./.installer/.",
            show_default=False,
        ),
    ] = None,
) -> None:
    paths.use_state_dir(state_dir)
    strategy_env(os.environ)  # a mistyped INSTALLER_ANSIBLE_STRATEGY stops here, before any host is touched
    _anchor_inventory_options(ctx.command, ctx)
    _audit_changing_commands(ctx.command, ctx)


def _audit_changing_commands(root: Any, ctx: typer.Context) -> None:
    for name in AUDITED:
        command = root
        for part in name.split():
            command = command.get_command(ctx, part) if command is not None else None
        if command is not None and not getattr(command, "audited", False):
            command.invoke = _recorded(name, command.invoke)
            command.audited = True


def _recorded(name: str, invoke: Callable[[typer.Context], Any]) -> Callable[[typer.Context], Any]:
    @functools.wraps(invoke)
    def run(ctx: typer.Context) -> Any:
        if name == "up" and ctx.params.get("check"):
            return invoke(ctx)
        with audited(name, _argv(ctx), ctx.params.get("inventory")):
            return invoke(ctx)

    return run


def _argv(ctx: typer.Context) -> list[str]:
    """The arguments as the user gave them (defaults left out), rebuilt from the parsed command
    line, from `--state-dir` down to the command's own options."""
    contexts = []
    node: Any = ctx  # the parents are the vendored click's Context, not typer's subclass
    while node is not None:
        contexts.append(node)
        node = node.parent
    argv: list[str] = []
    for level in reversed(contexts):
        if level.parent is not None:
            argv.append(level.info_name or "")
        for param in level.command.params:
            source = level.get_parameter_source(param.name or "")
            if getattr(source, "name", None) not in ("COMMANDLINE", "ENVIRONMENT"):
                continue
            value = level.params.get(param.name or "")
            values = value if isinstance(value, list | tuple) else [value]
            if param.param_type_name != "option":
                argv += [str(v) for v in values]
            elif getattr(param, "is_flag", False):
                flag = param.opts if value else param.secondary_opts
                argv += [max(flag, key=len)] if flag else []
            else:
                argv += [x for v in values for x in (max(param.opts, key=len), str(v))]
    return argv


@contextmanager
def audited(command: str, argv: list[str], inventory: Path | None) -> Iterator[None]:
    """Append a `started` entry before the block runs, so a command killed mid-way (SIGKILL, a
    lost machine) still leaves a trace, and one more when it ends: ok, or failed with the error's
    first line. Both carry the same run id. If the start cannot be recorded the command does not
    run: nothing may change the deployment unrecorded."""
    run = audit.new_run_id()
    audit.append(audit.new_entry(command, argv, inventory, None, run=run, started=True))
    try:
        yield
    except typer.Exit as exc:
        code = exc.exit_code
        _record(command, argv, inventory, run, None if code == 0 else f"exit code {code}", failing=code != 0)
        raise
    except typer.Abort:
        _record(command, argv, inventory, run, "aborted", failing=True)
        raise
    except KeyboardInterrupt:
        _record(command, argv, inventory, run, "interrupted", failing=True)
        raise
    except SystemExit as exc:  # SIGTERM while Ansible ran (procs.ChildGroup stops the installer so)
        code = exc.code if isinstance(exc.code, int) else 1
        error = None if code == 0 else f"terminated (exit code {code})"
        _record(command, argv, inventory, run, error, failing=code != 0)
        raise
    except Exception as exc:
        _record(command, argv, inventory, run, exc, failing=True)
        raise
    _record(command, argv, inventory, run, None, failing=False)


def _record(
    command: str, argv: list[str], inventory: Path | None, run: str, error: BaseException | str | None,
    failing: bool,
) -> None:
    try:
        audit.append(audit.new_entry(command, argv, inventory, error, run=run))
    except (audit.AuditError, OSError) as exc:
        if not failing:
            raise
        # The command's own error is the one the user must see; this one is said too.
        err_console.print(f"[bold red]audit:[/] {exc}", highlight=False)


InventoryOpt = Annotated[
    Path, typer.Option("--inventory", "-i", help="Inventory YAML file.", show_default=False)
]
# For the commands that also work with no deployment named (state, keys list): the inventory then
# only says whose state it is (the state folder next to it).
StateInventoryOpt = Annotated[
    Path | None,
    typer.Option("--inventory", "-i", help="Inventory file of the deployment: its state is the .installer/ beside it."),
]


def run_up(
    inventory: Path, bundle: Path | None, trusted_key: list[Path], insecure: bool, check: bool,
    prune: bool = False, adopt: bool = False, full: bool = False,
    on_result: Callable[[deploy.UpResult], None] | None = None,
) -> deploy.UpResult:
    """`installer up` (installer.flows.deploy.up) with live phases, then one row per host; `on_result`
    hears the result before a failed host raises (`installer plan` prints the plan it built)."""
    inv = load_inventory(inventory)
    reporter = RichReporter([h.name for h in inv.hosts])
    if insecure and bundle:
        console.print(
            "[bold red on yellow] INSECURE [/] [bold red]--insecure: the bundle is used even if it "
            "is unsigned or signed by an unknown key; its origin is not verified[/]"
        )
    with deployment_lock.held(inv.deployment, "up --check" if check else "up"):
        result = deploy.up(
            inventory, reporter, bundle_path=bundle, check=check, prune=prune,
            trusted_keys=tuple(trusted_key), insecure=insecure, adopt=adopt, full=full,
        )
    # The gpu column only where a host ran the GPU checks: CPU deployments keep their table.
    gpu = any(h.gpu for h in result.hosts)
    rows = [
        [h.name, h.address, h.state, str(h.changed), h.endpoint, h.model, h.detail[:80]] + ([h.gpu] if gpu else [])
        for h in result.hosts
    ]
    console.print(table(
        f"deployment {inv.deployment} — release {result.manifest.release_id}",
        ["host", "address", "state", "changed", "endpoint", "model", "detail"] + (["gpu"] if gpu else []), rows,
    ))
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in result.phases.items())
    console.print(f"phases: {timings}")
    console.print(f"run log: {result.run_dir}")
    if on_result is not None:
        on_result(result)
    if not result.success:
        failed = [f"{h.name}: {h.detail}" for h in result.hosts if h.state not in ("ready", "checked")]
        raise AnsibleError(f"{len(failed)} host(s) failed; see the run log", failed)
    if check:
        console.print(f"[yellow]check mode:[/] {result.changed} change(s) would be made")
    elif result.configure == "fast":
        console.print("[green]converged, verified (fast path):[/] every host matches its last full "
                      "configure and answered the proof request; Ansible skipped (`--full` runs it)")
    elif result.changed == 0:
        console.print("[green]converged:[/] nothing changed on any host (changed=0)")
    else:
        console.print(f"[green]done:[/] {result.changed} change(s) applied; every host serves")
    if inv.frontend is not None and not check:
        fe = inv.frontend
        console.print(f"clients: {prove.gateway_base(inv, fe.name or fe.address())}/v1 (the frontend's virtual IP "
                      f"{fe.address()}, held by one ready gateway host: `installer status` shows which)")
    return result
