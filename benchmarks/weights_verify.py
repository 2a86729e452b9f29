"""The host-side weights verifier's throughput with one core against all of them, side by side.

    .venv/bin/python -m benchmarks.weights_verify --size-gb 40            # the GPU machine
    .venv/bin/python -m benchmarks.weights_verify --size-gb 3 --file-gb 0.75   # a small machine

It writes a folder of `--size-gb` GB in files of `--file-gb` GB (a checkpoint's shards; kept in
--dir between runs, so a second run starts at once), lists it with `describe` (whole-file and
per-piece sha256, as a bundle build does) and then, `--rounds` times in a rotating order, runs:
  - 1-core:         installer.weights.verify with one thread (pieces)
  - all-per-file:   every core, each file one task (the manifest without pieces)
  - all-per-piece:  every core, each CHUNK of a file one task (what the hosts run)
  - sha256sum:      coreutils' sha256sum over the same files (one core; the reference)
Each run is --full (no cache). Without --cold the files stay in the page cache, so hashing is
measured, not the disk; --cold evicts this folder's files alone before each run
(posix_fadvise DONTNEED, nothing else of the machine's cache). Medians (min-max) and the load
go to benchmarks/results/weights_verify-<host>-<time>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from pathlib import Path

from installer.weights import verify as wv

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
_BLOCK = 64 << 20


def make_folder(folder: Path, size: int, file_size: int) -> list[Path]:
    """Files of file_size bytes (the last one shorter) summing to size; kept when already there."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted: list[tuple[Path, int]] = []
    left, i = size, 0
    while left > 0:
        n = min(file_size, left)
        wanted.append((folder / f"model-{i:05d}.safetensors", n))
        left, i = left - n, i + 1
    for extra in set(folder.iterdir()) - {p for p, _ in wanted}:
        extra.unlink()
    block = os.urandom(_BLOCK)
    for path, n in wanted:
        if path.exists() and path.stat().st_size == n:
            continue
        with path.open("wb") as fh:
            written = 0
            while written < n:
                # a counter in each block, so no two blocks are alike
                piece = (written.to_bytes(8, "little") + block[8:])[: n - written]
                fh.write(piece)
                written += len(piece)
    return [p for p, _ in wanted]


def evict(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (sha256sum)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=40.0)
    parser.add_argument("--file-gb", type=float, default=5.0, help="shard size (DeepSeek-V3's are about 4.3 GB)")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/pli-weights-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="evict the files from the page cache before each run")
    parser.add_argument("--workers", type=int, default=wv.workers_default())
    parser.add_argument("--runs", default="1-core,all-per-file,all-per-piece,sha256sum",
                        help="which of the runs, comma-separated (sha256sum of 40 GB takes minutes)")
    args = parser.parse_args()

    paths = make_folder(args.dir, int(args.size_gb * 1e9), int(args.file_gb * 1e9))
    total = sum(p.stat().st_size for p in paths)
    start = time.perf_counter()
    entries = wv.describe(str(args.dir), args.workers)
    describe_s = time.perf_counter() - start
    whole = [{k: v for k, v in e.items() if k != "chunks"} for e in entries]

    def ours(files: list[dict], workers: int) -> None:
        result = wv.verify(str(args.dir), files, full=True, workers=workers)
        if result.problems or result.hashed_bytes != total:
            raise SystemExit(f"verify failed: {result.problems[:3]}")

    def sha256sum() -> None:
        subprocess.run(["sha256sum", *map(str, paths)], check=True, capture_output=True)

    runs = {
        "1-core": lambda: ours(entries, 1),
        "all-per-file": lambda: ours(whole, args.workers),
        "all-per-piece": lambda: ours(entries, args.workers),
        "sha256sum": sha256sum,
    }
    names = [n for n in args.runs.split(",") if n]
    if set(names) - set(runs):
        raise SystemExit(f"--runs: unknown {sorted(set(names) - set(runs))}; choose from {', '.join(runs)}")
    seconds: dict[str, list[float]] = {n: [] for n in names}
    cores: dict[str, list[float]] = {n: [] for n in names}  # CPU seconds per wall second
    loads = []
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            if args.cold:
                evict(paths)
            loads.append(os.getloadavg()[0])
            t, cpu = time.perf_counter(), _cpu()
            runs[name]()
            seconds[name].append(time.perf_counter() - t)
            cores[name].append((_cpu() - cpu) / seconds[name][-1])
            print(f"round {r + 1} {name}: {seconds[name][-1]:.2f} s, {cores[name][-1]:.2f} cores busy", flush=True)

    def row(name: str) -> dict:
        s = seconds[name]
        med = statistics.median(s)
        return {"median_s": round(med, 3), "min_s": round(min(s), 3), "max_s": round(max(s), 3),
                "median_gb_per_s": round(total / med / 1e9, 3), "runs_s": [round(x, 3) for x in s],
                "median_cores_busy": round(statistics.median(cores[name]), 2)}

    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    report = {
        "host": platform.node(), "cpus": os.cpu_count(), "workers": args.workers, "size_bytes": total,
        "files": len(paths), "file_bytes": int(args.file_gb * 1e9), "chunk_bytes": wv.CHUNK,
        "cold": args.cold, "rounds": args.rounds, "describe_s": round(describe_s, 3),
        "load_1min": {"min": min(loads), "max": max(loads)}, "time_utc": stamp,
        "results": {n: row(n) for n in names},
    }
    base = RESULTS / f"weights_verify-{platform.node()}-{stamp}{'-cold' if args.cold else ''}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [
        f"# weights verify, {total / 1e9:.1f} GB in {len(paths)} files, {args.workers} workers, "
        f"{'cold' if args.cold else 'page cache warm'}, {args.rounds} rounds, load {min(loads):.1f}-{max(loads):.1f}",
        "", "| run | median s | min-max s | GB/s (median) | cores busy (CPU s / wall s) |", "|---|---|---|---|---|",
    ]
    for n in names:
        x = report["results"][n]
        lines.append(
            f"| {n} | {x['median_s']} | {x['min_s']}-{x['max_s']} | {x['median_gb_per_s']} | {x['median_cores_busy']} |"
        )
    lines.append(f"\ndescribe (whole-file and per-piece sha256, one read per file): {describe_s:.1f} s")
    base.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {base}.json")


if __name__ == "__main__":
    main()
