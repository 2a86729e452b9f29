"""`installer bench`: load an OpenAI-compatible endpoint and report latency and throughput."""

import asyncio
import math
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from installer.cli.root import app
from installer.cli.ui import console, table
from installer.flows.bench import BenchConfig, BenchReport, Stats, bench


@app.command("bench")
def bench_cmd(
    base_url: Annotated[
        str, typer.Option("--base-url", help="Endpoint, e.g. https://10.0.0.5:8080/v1 (the /v1 is optional)")
    ],
    model: Annotated[str, typer.Option(help="Model name to request.")],
    endpoint: Annotated[
        str, typer.Option(help="'chat' (/v1/chat/completions) or 'completions'.")
    ] = "chat",
    input_len: Annotated[
        int, typer.Option(help="Prompt length in tokens (approximate: random words).")
    ] = 1024,
    output_len: Annotated[int, typer.Option(help="Tokens to generate per request.")] = 512,
    range_ratio: Annotated[
        float, typer.Option(help="Draw lengths uniformly within ±this fraction.")
    ] = 0.0,
    num_requests: Annotated[
        int, typer.Option("--num-requests", "-n", help="Requests to send.")
    ] = 100,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", help="Requests in flight at most.")
    ] = 8,
    request_rate: Annotated[
        float, typer.Option(help="Requests/s (Poisson); inf: as fast as concurrency allows.")
    ] = math.inf,
    ignore_eos: Annotated[
        bool, typer.Option(help="Ask vLLM to generate exactly output-len tokens.")
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed of the random prompts.")] = 0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
) -> None:
    """Benchmark an OpenAI-compatible endpoint (the API key is read from $OPENAI_API_KEY)."""
    if endpoint not in ("chat", "completions"):
        raise typer.BadParameter("use 'chat' or 'completions'", param_hint="--endpoint")
    cfg = BenchConfig(
        base_url=base_url,
        model=model,
        api_key=os.environ.get("OPENAI_API_KEY"),
        endpoint=endpoint,  # type: ignore[arg-type]
        input_len=input_len,
        output_len=output_len,
        range_ratio=range_ratio,
        num_requests=num_requests,
        concurrency=concurrency,
        request_rate=request_rate,
        ignore_eos=ignore_eos,
        seed=seed,
    )
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("requests", total=num_requests)
        report = asyncio.run(bench(cfg, on_done=lambda _: progress.advance(task)))
    _print(report)
    if json_out:
        json_out.write_text(report.model_dump_json(indent=2) + "\n")
        console.print(f"report written to {json_out}")


def _row(name: str, stats: Stats | None) -> list[str]:
    if stats is None:
        return [name, "-", "-", "-", "-"]
    return [name, *(f"{v:.2f}" for v in (stats.mean, stats.p50, stats.p90, stats.p99))]


def _print(r: BenchReport) -> None:
    console.print(
        f"{r.completed} completed, {r.failed} failed in {r.duration_s:.1f} s: "
        f"{r.requests_per_s:.2f} req/s, {r.output_tokens_per_s:.1f} output tok/s, "
        f"{r.total_tokens_per_s:.1f} total tok/s; mean {r.mean_prompt_tokens:.0f} in / "
        f"{r.mean_output_tokens:.0f} out tokens"
    )
    console.print(
        table(
            "latency (ms)",
            ["metric", "mean", "p50", "p90", "p99"],
            [
                _row("TTFT", r.ttft_ms),
                _row("TPOT", r.tpot_ms),
                _row("ITL", r.itl_ms),
                _row("end-to-end", r.e2e_ms),
            ],
        )
    )
    for error, count in r.errors.items():
        console.print(f"[red]{count}x {error}[/]", markup=False)
