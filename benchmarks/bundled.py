"""What the bundle benchmarks (bundle_push.py, bundle_verify.py) share: the command line
(`--inventory`, `--runs`), the bundle `installer bundle build` makes for that inventory (cached,
so a rerun measures the same bytes), the one timer, and the results file's first keys."""

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from installer.bundle import build
from installer.bundle.manifest import Manifest
from installer.inventory import Inventory, load_inventory


def start(doc: str, runs: int) -> tuple[argparse.Namespace, Inventory, Path, Manifest]:
    """(the arguments, the inventory, the bundle's folder, its manifest); `doc`'s first paragraph
    is the --help description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=runs)
    args = parser.parse_args()
    inv = load_inventory(args.inventory)
    root, man, _ = build.build(inv)
    return args, inv, root, man


def timed(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def report_head(benchmark: str, load_before: tuple[float, ...], load_after: tuple[float, ...],
                **machine: str) -> dict[str, Any]:
    """Which benchmark, when, and the machine it ran on with its load before and after the runs
    (a loaded machine's figures are not comparable); `machine` adds notes about it."""
    return {
        "benchmark": benchmark,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            **machine,
        },
    }
