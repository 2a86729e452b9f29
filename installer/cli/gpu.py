"""`installer doctor`: NVIDIA GPU checks on each inventory host (or here, with --local); with
--collect, a support archive instead (installer/diagnostics/collect.py).

installer/flows/gpu_checks.py runs installer/gpu/doctor.py on the hosts over SSH: nvidia-smi health,
Xid errors, a GEMM and an NCCL all-reduce. This module prints one table row per host; the full
results are in the run log (and --json).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from installer.cli.root import app
from installer.cli.ui import console, table
from installer.diagnostics import collect as collect_flow
from installer.flows import gpu_checks
from installer.inventory import Inventory, load_inventory


def _row(r: dict[str, Any]) -> list[str]:
    if "error" in r:
        # the error under "problems": every column between is unknown
        return [r["host"], "[red]fail[/]", *["-"] * 9, r["error"][:70]]
    f = r["facts"]
    checks = {c["name"]: c for c in r["checks"]}
    gpus = [c["gpu"] for c in r["checks"] if "gpu" in c]
    names = sorted({str(g["name"]) for g in gpus})
    temps = [g["temperature_c"] for g in gpus if isinstance(g.get("temperature_c"), int)]
    gemm = [g["tflops"] for g in checks.get("gemm", {}).get("gpus", [])]
    nccl = checks.get("nccl", {})
    color = {"ok": "green", "warn": "yellow", "fail": "red"}.get(r["status"], "dim")
    shown = ("fail", "warn", "skip") if r["status"] == "skip" else ("fail", "warn")
    bad = [f"{c['name']}: {c['detail']}" for c in r["checks"] if c["status"] in shown]
    return [
        r["host"],
        f"[{color}]{r['status']}[/]",
        f"{f['gpu_count']} x {', '.join(names)}" if names else str(f["gpu_count"]),
        f["driver"]["version"] or "-",
        f["cuda_driver_version"] or "-",
        "/".join(sorted({str(g["ecc"]) for g in gpus})) or "-",
        "/".join(sorted({str(g["persistence"]) for g in gpus})) or "-",
        "/".join(sorted({str(g["mig"]) for g in gpus})) or "-",
        f"{max(temps)}" if temps else "-",
        (f"{min(gemm):.0f}" + (f"-{max(gemm):.0f}" if max(gemm) != min(gemm) else ""))
        if gemm
        else checks.get("gemm", {}).get("status", "-"),
        (
            f"{nccl['busbw_gbps']:.0f} GB/s"
            + (
                f" (exp. {nccl['expected']['low']}-{nccl['expected']['high']}, {nccl['expected']['link']})"
                if (nccl.get("expected") or {}).get("high")
                else ""
            )
            if "busbw_gbps" in nccl and nccl.get("world_size", 1) > 1
            else "ok (1 GPU)"
            if nccl.get("status") == "ok"
            else nccl.get("status", "-")
        ),
        "; ".join(bad)[:90],
    ]


def _collect(inv: Inventory, journal_lines: int, output: Path | None) -> None:
    with console.status("collecting") as shown:
        result = collect_flow.collect(inv, journal_lines, output, progress=shown.update)
    console.print(
        table(
            f"Support archive — {inv.deployment}",
            ["host", "collected", "missing", "redactions"],
            [[r.host, str(r.collected), str(r.missing), str(r.redactions)] for r in result.rows],
        )
    )
    for line in result.missing:
        console.print(f"  [yellow]not collected[/] {line}", highlight=False)
    for hit in result.redactions:
        console.print(f"  [cyan]redacted[/] {hit['file']}: {hit['rule']} x{hit['count']}", highlight=False)
    console.print(f"support archive: {result.path}")


@app.command()
def doctor(
    inventory: Annotated[
        Path | None, typer.Option("--inventory", "-i", help="Check every host of this inventory.")
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="Check this machine instead.")] = False,
    gemm: Annotated[bool, typer.Option(help="Run the bf16 GEMM on every GPU.")] = True,
    nccl: Annotated[bool, typer.Option(help="Run an NCCL all-reduce over all GPUs.")] = True,
    min_tflops: Annotated[
        float, typer.Option(help="Fail a GPU whose GEMM is slower (TFLOP/s); 0: report only.")
    ] = 0.0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write every host's full result here.")
    ] = None,
    collect: Annotated[
        bool,
        typer.Option(
            "--collect",
            help="Instead of the checks, write a support archive (tar.gz): per host nvidia-smi, GPU "
            "metrics, kernel Xid lines, unit journals, redacted configuration, versions; "
            "`installer status` and the last hour of Prometheus.",
        ),
    ] = False,
    journal_lines: Annotated[
        int, typer.Option(help="With --collect: the last this many lines of each unit's journal.", min=1)
    ] = collect_flow.DEFAULT_JOURNAL_LINES,
    output: Annotated[
        Path | None,
        typer.Option(help="With --collect: the archive's file or folder; default: the state folder's support/."),
    ] = None,
) -> None:
    """Check NVIDIA GPUs: driver, CUDA, ECC, persistence, MIG, temperature, Xid, GEMM, NCCL."""
    if collect:
        if inventory is None or local:
            raise typer.BadParameter("--collect needs --inventory FILE", param_hint="--collect")
        _collect(load_inventory(inventory), journal_lines, output)
        return
    if local == (inventory is not None):
        raise typer.BadParameter(
            "give --inventory FILE or --local", param_hint="--inventory/--local"
        )
    options = gpu_checks.Options(gemm=gemm, nccl=nccl, min_tflops=min_tflops)
    if local:
        run = gpu_checks.doctor(None, options, json_out)
    else:
        inv = load_inventory(inventory)  # type: ignore[arg-type]
        with console.status(f"checking the GPUs of {len(inv.hosts)} host(s)"):
            run = gpu_checks.doctor(inv, options, json_out)
    console.print(
        table(
            f"GPU checks — {run.deployment}",
            [
                "host",
                "status",
                "GPUs",
                "driver",
                "CUDA",
                "ECC",
                "persist.",
                "MIG",
                "max °C",
                "GEMM TFLOP/s",
                "all-reduce",
                "problems",
            ],
            [_row(r) for r in run.results],
        )
    )
    if json_out:
        console.print(f"results written to {json_out}")
    console.print(f"run log: {run.log_dir}")
    run.raise_for_failures()
