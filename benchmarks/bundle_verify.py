"""How fast a bundle is verified, next to `sha256sum` on the same files, alternating, in one run.

    .venv/bin/python benchmarks/bundle_verify.py --inventory inventory/lab.yml [--runs 5]

The bundle is the one `installer bundle build` makes for the inventory (cached), signed with a
throwaway key and unpacked the way `installer up --bundle` unpacks it. Each run times, in a
rotating order and with every file already in the page cache (so hashing is measured, not the
disk):
  - cli-dir:    `installer bundle verify DIR` (signature, then every file; process start included)
  - lib-dir:    the same check in-process (installer.bundle.build.check_bundle)
  - sha256sum:  `sha256sum --quiet --strict -c bundle.sha256` in DIR (the same files)
  - cli-tar:    `installer bundle verify TAR` (one sequential read of the tar)
  - sha256sum-tar: `sha256sum TAR` (the same bytes)
Medians (min-max) go to benchmarks/results/bundle_verify.json with the machine's load.
The target: our throughput >= 0.9x sha256sum's on the same files.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks import bundled  # noqa: E402
from benchmarks.bundled import timed  # noqa: E402
from installer.bundle import build, sign  # noqa: E402
from installer.bundle.manifest import MANIFEST  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def run(argv: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stdout}{proc.stderr}")


def warm(paths: list[Path]) -> None:
    for path in paths:
        with path.open("rb") as fh:
            while fh.read(1 << 22):
                pass


def main() -> None:
    args, _inv, root, man = bundled.start(__doc__, runs=5)
    work = Path(tempfile.mkdtemp(prefix="pli-bench-verify-", dir="/var/tmp"))
    try:
        pair = sign.keygen(work / "keys", "bench")
        private = sign.load_private_key(pair.private_key)
        tar = work / "bundle.tar"
        build.write_tar(root, tar, sign.signature_for((root / MANIFEST).read_bytes(), private))
        tar_size = tar.stat().st_size
        os.environ["INSTALLER_CACHE_DIR"] = str(work / "cache")
        trust = sign.Trust(keys=(pair.public_key,))
        unpacked = build.open_bundle(tar, trust).root
        files = [unpacked / f.path for f in man.files]
        warm([*files, tar])
        cli = [
            sys.executable,
            "-m",
            "installer",
            "bundle",
            "verify",
            "--trusted-key",
            str(pair.public_key),
        ]
        cases = {
            "cli-dir": lambda: run([*cli, str(unpacked)], cwd=REPO),
            "lib-dir": lambda: build.check_bundle(unpacked, trust),
            "sha256sum": lambda: run(
                ["sha256sum", "--quiet", "--strict", "-c", "bundle.sha256"], cwd=unpacked
            ),
            "cli-tar": lambda: run([*cli, str(tar)], cwd=REPO),
            "sha256sum-tar": lambda: run(["sha256sum", str(tar)]),
        }
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for i in range(args.runs):
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                times[name].append(timed(cases[name]))
            print(f"run {i + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in names))
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    size = man.total_size

    def summary(name: str, nbytes: int) -> dict:
        median = statistics.median(times[name])
        return {
            "median_s": round(median, 3),
            "min_s": round(min(times[name]), 3),
            "max_s": round(max(times[name]), 3),
            "mb_per_s": round(nbytes / median / 1e6, 1),
            "runs_s": [round(t, 3) for t in times[name]],
        }

    results = {name: summary(name, tar_size if "tar" in name else size) for name in cases}
    ratio = {
        "cli-dir vs sha256sum": round(
            results["sha256sum"]["median_s"] / results["cli-dir"]["median_s"], 2
        ),
        "lib-dir vs sha256sum": round(
            results["sha256sum"]["median_s"] / results["lib-dir"]["median_s"], 2
        ),
        "cli-tar vs sha256sum-tar": round(
            results["sha256sum-tar"]["median_s"] / results["cli-tar"]["median_s"], 2
        ),
    }
    report = {
        **bundled.report_head("bundle_verify", load_before, load_after),
        "bundle": {
            "id": man.bundle_id[:12],
            "files": len(man.files),
            "bytes": size,
            "tar_bytes": tar_size,
        },
        "runs": args.runs,
        "results": results,
        "throughput_ratio_vs_sha256sum": ratio,
        "target": "throughput >= 0.9x sha256sum on the same files",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bundle_verify.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"ratio": ratio, "mb_per_s": {n: r["mb_per_s"] for n, r in results.items()}}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
