"""How long removing a lab host's tree takes: `rm -rf` alone, as `lab down` did, next to
installer.lab.rootfs.remove_tree (files unlinked by several threads, then `rm -rf`).

    .venv/bin/python benchmarks/tree_removal.py [--source .venv] [--rounds 2]

`lab down`'s time is removing its hosts' trees (docs/benchmarks.md): GBs of venvs and bundles,
100,000s of files. Each round copies `--source` (this venv by default: files like a release's)
twice into a folder beside the labs (`.installer/`, the same filesystem), syncs, and times each
removal up to a `sync` after it (the journal's writes counted), in alternating order. Results,
with the machine's load, go to benchmarks/results/tree_removal-<UTC stamp>.{json,md}.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from installer.lab import rootfs  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def _rm(path: Path) -> None:
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


def _timed(remove, path: Path) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    remove(path)
    os.sync()
    return round(time.perf_counter() - start, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO / ".venv")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    scratch = REPO / ".installer" / "bench-tree-removal"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    files = sum(len(f) for _, _, f in os.walk(args.source))
    times: dict[str, list[float]] = {"rm -rf": [], "remove_tree": []}
    loads = []
    try:
        for n in range(args.rounds):
            trees = {name: scratch / f"{n}-{i}" for i, name in enumerate(times)}
            for tree in trees.values():
                subprocess.run(["cp", "-a", str(args.source), str(tree)], check=True)
            os.sync()
            loads.append(os.getloadavg()[0])
            order = list(times) if n % 2 == 0 else list(reversed(times))
            for name in order:
                times[name].append(_timed(_rm if name == "rm -rf" else rootfs.remove_tree, trees[name]))
                print(f"round {n + 1}: {name} {times[name][-1]} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M")
    result = {
        "source": str(args.source), "files": files, "rounds": args.rounds, "cpus": os.cpu_count(),
        "load_1m": loads, "seconds": times,
        "median": {k: round(statistics.median(v), 2) for k, v in times.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"tree_removal-{stamp}.json").write_text(json.dumps(result, indent=1) + "\n")
    rows = "\n".join(f"| {k} | {', '.join(map(str, v))} | {result['median'][k]} |" for k, v in times.items())
    (RESULTS / f"tree_removal-{stamp}.md").write_text(
        f"# Tree removal, {stamp} UTC\n\n{files} files ({args.source}), {os.cpu_count()} CPUs, "
        f"load (1 min) {', '.join(f'{x:.1f}' for x in loads)} at each round's start; each time "
        f"includes a sync.\n\n| removal | seconds per round | median |\n|---|---|---|\n{rows}\n"
    )
    print(json.dumps(result["median"]))


if __name__ == "__main__":
    main()
