"""`installer doctor`, and the GPU fit section of `installer plan`.

doctor runs installer/gpu/doctor.py on each inventory host over SSH (or here, with --local):
nvidia-smi health, Xid errors, a GEMM and an NCCL all-reduce; one table row per host, the full
results as JSON in the run log (and --json). The fit section reads the GPUs from the
inventory's cloud section or from the latest doctor run, and the model from its config.json.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer

from installer import engines
from installer.cli.root import app
from installer.errors import InstallerError
from installer.gpu import doctor as gpu_doctor
from installer.gpu.matrix import gpu_type
from installer.gpu.planner import load_config
from installer.gpu.tuner import HostHardware, Tuned, TuneError
from installer.inventory import Inventory, load_inventory
from installer.paths import state_dir
from installer.runlog import RunLog
from installer.ssh import Target, targets
from installer.topology import HOST_LAYOUT
from installer.ui import console, table

DOCTOR_SCRIPT = Path(gpu_doctor.__file__)
# The engine's environment has torch with CUDA once `installer up` has installed a release.
HOST_TORCH_PYTHON = f"{HOST_LAYOUT['pli_root']}/current/venv/bin/python"


class GPUCheckError(InstallerError):
    """One or more hosts failed their GPU checks."""


def _remote_check(t: Target, args: list[str], timeout: float) -> dict[str, Any]:
    """Copy the doctor to a temporary file on the host, run it, remove it; its JSON result."""
    remote = (
        't=$(mktemp /tmp/pli-doctor.XXXXXX) && cat > "$t" && '
        f'python3 "$t" {shlex.join(args)}; rc=$?; rm -f "$t"; exit $rc'
    )
    try:
        p = subprocess.run(
            t.ssh_argv(remote),
            input=DOCTOR_SCRIPT.read_bytes(),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"host": t.name, "status": "fail", "error": f"no answer within {timeout:.0f} s"}
    out = p.stdout.decode(errors="replace").strip().splitlines()
    if not out or not out[-1].startswith("{"):
        err = (p.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return {"host": t.name, "status": "fail", "error": f"ssh rc {p.returncode}: {err}"}
    result: dict[str, Any] = json.loads(out[-1])
    result["host"] = t.name
    return result


def _row(r: dict[str, Any]) -> list[str]:
    if "error" in r:
        return [r["host"], "[red]fail[/]", "-", "-", "-", "-", "-", "-", "-", "-", r["error"][:70]]
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
) -> None:
    """Check NVIDIA GPUs: driver, CUDA, ECC, persistence, MIG, temperature, Xid, GEMM, NCCL."""
    if local == (inventory is not None):
        raise typer.BadParameter(
            "give --inventory FILE or --local", param_hint="--inventory/--local"
        )
    args = ["check", "--min-tflops", str(min_tflops), "--torch-python", HOST_TORCH_PYTHON]
    args += ([] if gemm else ["--no-gemm"]) + ([] if nccl else ["--no-nccl"])
    if local:
        results = [gpu_doctor.check(gemm=gemm, nccl=nccl, min_tflops=min_tflops)]
        deployment = "local"
    else:
        inv = load_inventory(inventory)  # type: ignore[arg-type]
        deployment = inv.deployment
        hosts = targets(inv)
        with (
            console.status(f"checking the GPUs of {len(hosts)} host(s)"),
            ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts)))) as pool,
        ):
            results = list(pool.map(lambda t: _remote_check(t, args, 900), hosts))
    log = RunLog("doctor", deployment)
    log.write_summary({"hosts": results})
    console.print(
        table(
            f"GPU checks — {deployment}",
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
            [_row(r) for r in results],
        )
    )
    if json_out:
        json_out.write_text(json.dumps({"hosts": results}, indent=1) + "\n")
        console.print(f"results written to {json_out}")
    console.print(f"run log: {log.dir}")
    failed = [r for r in results if r["status"] == "fail"]
    if failed:
        raise GPUCheckError(
            f"{len(failed)} of {len(results)} host(s) failed their GPU checks",
            [
                f"{r['host']}: "
                + (
                    r.get("error")
                    or "; ".join(
                        f"{c['name']}: {c['detail']}" for c in r["checks"] if c["status"] == "fail"
                    )
                )
                for r in failed
            ],
        )


# ------------------------------------------------------------------ fit section of `plan`


def _doctor_hosts(inv: Inventory) -> list[HostHardware]:
    """The hosts as the latest `installer doctor -i` of this deployment saw them."""
    runs = sorted(
        (state_dir() / "runs").glob(f"*-doctor-{inv.deployment}"), key=lambda p: p.stat().st_mtime
    )
    for run in reversed(runs):
        try:
            summary = json.loads((run / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        hosts = [
            HostHardware.from_facts(h["facts"], h["host"])
            for h in summary.get("hosts", [])
            if h.get("facts", {}).get("gpus")
        ]
        if hosts:
            return hosts
    return []


def gpu_hosts(inv: Inventory) -> tuple[list[HostHardware], str]:
    """(hosts, where their GPUs come from) for planning: the cloud section, else doctor facts."""
    cloud = inv.cloud
    if cloud is not None and cloud.gpu is not None and cloud.gpu.count:
        gpu = gpu_type(cloud.gpu.type)
        hosts = [
            HostHardware.of_type(f"{inv.deployment}-{i + 1}", gpu, cloud.gpu.count)
            for i in range(cloud.count)
        ]
        return hosts, f"cloud.gpu: {cloud.count} x {cloud.gpu.count} x {gpu.name}"
    hosts = _doctor_hosts(inv)
    if hosts:
        return hosts, f"installer doctor: {len(hosts)} host(s) probed"
    return [], ""


def print_fit_section(inv: Inventory) -> Tuned | None:
    """Print whether the inventory's model fits its GPUs, and the vLLM settings derived for it."""
    if inv.engine.device != "gpu":
        return None
    try:
        hosts, source = gpu_hosts(inv)
    except InstallerError as exc:  # a cloud GPU type the catalogue does not know
        console.print(f"GPU fit: {exc}")
        return None
    if not hosts:
        console.print(
            "GPU fit: the inventory does not say which GPUs the hosts have; run "
            "`installer doctor -i <inventory>` once and plan again"
        )
        return None
    spec = load_config(inv.model.path)
    try:
        tuned = engines.tune_for(inv, hosts)  # the call `up` makes (installer/plan.py)
    except TuneError as exc:
        console.print(f"[red]GPU fit: {exc}[/]")
        for line in exc.details:
            console.print(f"  {line}")
        return None
    s, fit = tuned.settings, tuned.recommendation.fit
    assert fit is not None
    console.print(
        f"GPU fit — {spec.name}: {spec.total_params() / 1e9:.1f}B parameters "
        f"({spec.active_params() / 1e9:.1f}B active), {source}: "
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
            f"{fit.weights_gib:.1f} weights + {fit.activation_gib + fit.overhead_gib:.1f} "
            f"activations/overhead + {fit.kv_gib:.1f} KV GiB",
            f"of {fit.budget_gib:.1f} GiB vLLM may use",
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
    if tuned.ray:
        console.print(
            f"Ray: head {tuned.ray.head}, workers {', '.join(tuned.ray.workers)} "
            f"(port {tuned.ray.port})"
        )
    for note in tuned.notes:
        console.print(f"[yellow]note:[/] {note}")
    return tuned
