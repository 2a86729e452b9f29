"""`installer plan` and `installer down`: the Terraform side of a deployment.

`installer up` provisions through the same library (installer.terraform.provision), called
from the deploy flow's provision phase; `plan` asks installer/flows/preview.py and installer/flows/gpu_fit.py,
`down` installer/day2/down.py.
"""

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from installer.base.errors import AnsibleError
from installer.cli.root import InventoryOpt, app, run_up
from installer.cli.ui import console, table
from installer.day2 import down as teardown
from installer.flows import gpu_fit, plan_history, preview
from installer.gpu.tuner import Tuned
from installer.inventory import Inventory, load_inventory, profile_checks
from installer.planning import plan as deployment_plan
from installer.planning import plan_record
from installer.state import deployment_lock
from installer.terraform.cli import ChangeSummary
from installer.terraform.provision import describe

BundleOpt = Annotated[
    Path | None,
    typer.Option(help="Bundle that carries terraform and its providers (offline machines)."),
]
TrustedKeyOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--trusted-key",
        help="Public key (.pub) whose bundle signatures are accepted; repeatable. "
        "Default: every *.pub in the state's keys/.",
        show_default=False,
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="Accept an unsigned or untrusted --bundle, and run its terraform here. Unsafe.",
    ),
]


def _note(text: str) -> None:
    console.print(f"  {text}")


def _print_changes(title: str, summary: ChangeSummary) -> None:
    rows = [[c.action, c.address] for c in summary.changes if c.action != "noop"]
    if rows:
        console.print(table(title, ["action", "resource"], rows))
    console.print(f"terraform: {describe(summary)}")
    for warning in summary.warnings:
        console.print(f"[yellow]{warning.line()}[/]")


def print_fit_section(inv: Inventory) -> Tuned | None:
    """Print whether the inventory's model fits its GPUs, and the vLLM settings derived for it."""
    fit = gpu_fit.fit(inv)
    if fit is None:
        return None
    if fit.unknown:
        console.print(f"GPU fit: {fit.unknown}")
        return None
    if fit.refused is not None:
        console.print(f"[red]GPU fit: {fit.refused}[/]")
        for line in fit.refused.details:
            console.print(f"  {line}")
        return None
    tuned, spec = fit.tuned, fit.spec
    assert tuned is not None and spec is not None
    s, mem = tuned.settings, tuned.recommendation.fit
    assert mem is not None
    console.print(
        f"GPU fit — {spec.name}: {spec.total_params() / 1e9:.1f}B parameters "
        f"({spec.active_params() / 1e9:.1f}B active), {fit.source}: "
        f"[green]{tuned.recommendation.verdict}[/]"
    )
    rows = [
        [k, str(s[k]), tuned.why.get(k, "")]
        for k in (
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "engines_per_host",
            "gpu_memory_utilization",
            "max_model_len",
            "max_num_seqs",
            "kv_cache_dtype",
            "quantization",
            "enable_prefix_caching",
        )
    ]
    rows.append(
        [
            "memory per GPU",
            f"{mem.weights_gib:.1f} weights + {mem.activation_gib + mem.overhead_gib:.1f} "
            f"activations/overhead + {mem.kv_gib:.1f} KV GiB",
            f"of {mem.budget_gib:.1f} GiB vLLM may use",
        ]
    )
    console.print(table("vLLM settings", ["setting", "value", "why"], rows))
    console.print(
        table(
            "engines",
            ["host", "engine", "port", "CUDA_VISIBLE_DEVICES", "CPUs", "NUMA"],
            [
                [
                    e.host,
                    str(e.index),
                    str(e.port),
                    e.env.get("CUDA_VISIBLE_DEVICES", "all"),
                    e.cpus,
                    ",".join(map(str, e.numa_nodes)) or "-",
                ]
                for e in tuned.engines
            ],
        )
    )
    spread = fit.layout()
    if spread is not None:  # which ranks on which host, over which links, and why (docs/multinode.md)
        for line in spread.lines():
            console.print(line, soft_wrap=True, markup=False, highlight=False)
    for note in tuned.notes:
        console.print(f"[yellow]note:[/] {note}")
    return tuned


def print_profile_section(inv: Inventory) -> None:
    """Each model's serving profile, every flag it adds to the engines, and what caused each."""
    for m in profile_checks.resolve_all(inv):
        r = m.resolved
        console.print(f"serving profile — {escape(m.label)}: [bold]{r.profile}[/] ({escape(r.why)})",
                      soft_wrap=True, highlight=False)
        if r.flags:
            rows = [[escape(shlex.join(f.argv)), escape(f.cause)] for f in r.flags]
            console.print(table(f"flags {escape(m.label)}'s profile adds", ["flag", "caused by"], rows))
        if r.env:
            rows = [[escape(f"{e.name}={e.value}"), escape(e.cause)] for e in r.env]
            console.print(table(f"environment {escape(m.label)}'s profile sets (engine.env wins)",
                                ["variable", "caused by"], rows))
        for note in r.notes:
            console.print(f"  {note}", markup=False, highlight=False)


def _print_engines(dp: deployment_plan.DeploymentPlan | None) -> None:
    """Every engine's (host, unit, argv) of the command's one plan: exactly what `up` deploys."""
    if dp is None:
        console.print("engines: laid out at preflight for the GPUs the hosts report (no gpu.type/gpu.count)")
        return
    console.print(f"hardware: {dp.hardware}", markup=False)
    for host, unit, argv in dp.engine_commands():
        console.print(f"{host} {unit}: {shlex.join(argv)}", soft_wrap=True, markup=False)


def _print_history(inv: Inventory, revision: int | None) -> None:
    """--revision R: the plan that revision was deployed with; --diff: the running one's against now."""
    if revision is not None:
        for line in plan_record.lines(plan_history.of_revision(inv.deployment, revision)):
            console.print(line, soft_wrap=True, markup=False, highlight=False)
        return
    compared = plan_history.diff_running(inv)
    if not compared.lines:
        console.print(f"[green]no change:[/] the inventory's plan is revision {compared.running}'s (running)")
        return
    for line in compared.lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)


@app.command()
def plan(
    inventory: InventoryOpt,
    bundle: BundleOpt = None,
    trusted_key: TrustedKeyOpt = None,
    insecure: InsecureOpt = False,
    revision: Annotated[int | None, typer.Option(
        "--revision", help="Show the plan revision R was deployed with (`installer releases` lists them).")] = None,
    diff: Annotated[bool, typer.Option(
        "--diff", help="Compare the inventory's plan with the running revision's; changes nothing.")] = False,
) -> None:
    """Show what `installer up` would change: cloud resources (Terraform), then hosts (Ansible)."""
    inv = load_inventory(inventory)
    if revision is not None or diff:
        _print_history(inv, revision)
        return
    # Does the model fit the GPUs at all? Cheap, offline, and worth knowing before anything else.
    print_fit_section(inv)
    print_profile_section(inv)
    trusted = tuple(trusted_key or ())
    if inv.provider != "baremetal":
        cloud = preview.cloud_changes(inv, bundle, trusted, insecure, _note)
        _print_changes(f"terraform plan — deployment {inv.deployment} ({inv.provider})", cloud.summary)
        if not cloud.check_hosts():
            _print_engines(deployment_plan.plan_before_preflight(inv))
            console.print(
                f"ansible: {len(cloud.new_machines)} new machine(s); `installer up` creates them, then "
                "runs every role on every host (nothing to compare with before they exist)"
            )
            return
    # The hosts exist: their preflight lays the plan out, Ansible's check mode tells what it would change.
    # The engines of the plan that run built, printed even when a host fails check mode (a fresh
    # host's later tasks do: their packages are not installed yet).
    run_up(inventory=inventory, bundle=bundle, trusted_key=list(trusted), insecure=insecure, check=True,
           on_result=lambda result: _print_engines(result.deployment_plan))


@app.command()
def down(
    inventory: InventoryOpt,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Destroy without asking.")] = False,
) -> None:
    """Remove the deployment: private-llm from bare-metal hosts, or the cloud resources (asks first)."""
    inv = load_inventory(inventory)
    with deployment_lock.held(inv.deployment, "down"):
        _down(inv, yes)


def _down(inv: Inventory, yes: bool) -> None:
    if inv.provider == "baremetal":
        _remove_from_hosts(inv, yes)
        return
    pending = teardown.plan_destroy(inv, _note)
    if pending is None:
        console.print(f"nothing to destroy: deployment {inv.deployment} has no cloud resources")
        return
    summary = pending.summary
    _print_changes(f"terraform destroy — deployment {inv.deployment} ({inv.provider})", summary)
    question = f"Destroy these {summary.remove} resource(s) of deployment {inv.deployment}?"
    if not yes and not typer.confirm(question, default=False):
        pending.discard()
        console.print("[yellow]kept:[/] nothing was destroyed")
        raise typer.Exit(1)
    done = teardown.destroy(pending, _note)
    console.print(f"[green]destroyed:[/] {done.remove} resource(s) of deployment {inv.deployment}")


def _remove_from_hosts(inv: Inventory, yes: bool) -> None:
    names = ", ".join(h.name for h in inv.hosts)
    question = f"Remove private-llm (services, files, user) from {len(inv.hosts)} host(s): {names}?"
    if not yes and not typer.confirm(question, default=False):
        console.print("[yellow]kept:[/] nothing was removed")
        raise typer.Exit(1)
    removal = teardown.remove_from_hosts(inv)
    rows = [
        [h.name, h.address, "removed" if h.removed else "FAILED", h.changed, h.detail[:80]]
        for h in removal.hosts
    ]
    columns = ["host", "address", "state", "changed", "detail"]
    console.print(table(f"down — deployment {inv.deployment}", columns, rows))
    if not removal.success:
        raise AnsibleError("private-llm could not be removed from every host; see the run log", [str(removal.log_dir)])
    console.print(f"[green]removed:[/] private-llm from {len(removal.removed)} host(s)")
