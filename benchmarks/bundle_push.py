"""Pushing a bundle to N hosts, next to a plain sequential `scp -r` of the same bytes, in one run.

    sudo .venv/bin/installer lab up --name bench --subnet 10.213.12.0/24 --hosts 4 \\
        --inventory /var/tmp/bench.yml
    .venv/bin/python benchmarks/bundle_push.py --inventory /var/tmp/bench.yml [--runs 3]
    sudo .venv/bin/installer lab down --name bench

The bundle is the one `installer bundle build` makes for the inventory (cached). For each
host count k (1, 2, 4, ... up to the inventory's hosts), each run, in alternating order, from
hosts that hold nothing:
  - push: installer.bundle.push to the k hosts in parallel, as `installer up` does -- with the
    check before and the sha256 check of every received byte on each host after;
  - scp:  `scp -r` of the bundle directory to each of the k hosts, one after the other (no
    check at all), with the same ssh options -- once with OpenSSH's default cipher, once with
    the AES-GCM cipher the push prefers (so the cipher's share of the difference shows);
and, with the bundle already on the hosts, the no-op push (the check alone) that a converged
`installer up` pays. Medians (min-max) go to benchmarks/results/bundle_push.json.

On a lab, every "host" shares this machine's CPUs with the sender, so parallel pushes compete
for the same cores; real hosts bring their own.
"""

import json
import os
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks import bundled  # noqa: E402
from benchmarks.bundled import timed  # noqa: E402
from installer.bundle import push  # noqa: E402
from installer.hosts.ssh import Target, targets  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SCP_DEST = "/var/tmp/pli-scp-bench"


def ssh(target: Target, command: str) -> None:
    subprocess.run(target.ssh_argv(command), check=True, capture_output=True)


def clean(hosts: list[Target]) -> None:
    command = f"rm -rf {push.HOST_BUNDLES}/* {SCP_DEST} && mkdir -p {SCP_DEST} && sync"
    with ThreadPoolExecutor(len(hosts)) as pool:
        list(pool.map(lambda t: ssh(t, command), hosts))


def scp_sequential(hosts: list[Target], root: Path, cipher: list[str]) -> None:
    for t in hosts:
        argv = ["scp", "-q", "-r", *cipher, *t.ssh_options(), "-P", str(t.port), str(root)]
        subprocess.run([*argv, f"{t.user}@{t.address}:{SCP_DEST}/"], check=True)


def push_parallel(hosts: list[Target], root: Path, man) -> list[push.PushResult]:
    return push.push(hosts, root, man, lambda _h, _s, _t: None)


def stats(values: list[float]) -> dict:
    return {
        "median_s": round(statistics.median(values), 2),
        "min_s": round(min(values), 2),
        "max_s": round(max(values), 2),
        "runs_s": [round(v, 2) for v in values],
    }


def main() -> None:
    args, inv, root, man = bundled.start(__doc__, runs=3)
    all_hosts = targets(inv)
    counts = sorted({k for k in (1, 2, 4, 8, 16) if k <= len(all_hosts)} | {len(all_hosts)})
    load_before = os.getloadavg()
    results = []
    for k in counts:
        hosts = all_hosts[:k]
        push_t, scp_t, scp_gcm_t, noop_t = [], [], [], []
        names = ["push", "scp", "scp-gcm"]
        for i in range(args.runs):
            for name in names[i % 3 :] + names[: i % 3]:
                clean(hosts)
                if name == "push":
                    push_t.append(timed(lambda h=hosts: push_parallel(h, root, man)))
                    noop_t.append(timed(lambda h=hosts: push_parallel(h, root, man)))
                elif name == "scp":
                    scp_t.append(timed(lambda h=hosts: scp_sequential(h, root, [])))
                else:
                    gcm = ["-c", "aes128-gcm@openssh.com"]
                    scp_gcm_t.append(timed(lambda h=hosts, c=gcm: scp_sequential(h, root, c)))
            print(
                f"{k} host(s), run {i + 1}: push {push_t[-1]:.1f}s, scp {scp_t[-1]:.1f}s, "
                f"scp aes-gcm {scp_gcm_t[-1]:.1f}s, no-op push {noop_t[-1]:.1f}s",
                flush=True,
            )
        row = {
            "hosts": k,
            "bytes_per_host": man.total_size,
            "push_parallel_verified": stats(push_t),
            "scp_sequential_unverified": stats(scp_t),
            "scp_sequential_unverified_aes128gcm": stats(scp_gcm_t),
            "push_noop_already_there": stats(noop_t),
        }
        push_median = row["push_parallel_verified"]["median_s"]
        row["speedup_vs_scp"] = round(row["scp_sequential_unverified"]["median_s"] / push_median, 2)
        row["speedup_vs_scp_aes128gcm"] = round(
            row["scp_sequential_unverified_aes128gcm"]["median_s"] / push_median, 2
        )
        row["push_mb_per_s_total"] = round(
            k * man.total_size / row["push_parallel_verified"]["median_s"] / 1e6, 1
        )
        results.append(row)
    clean(all_hosts)
    load_after = os.getloadavg()
    report = {
        **bundled.report_head("bundle_push", load_before, load_after,
                              note="lab hosts are containers on this machine: sender and hosts share its CPUs"),
        "bundle": {"id": man.bundle_id[:12], "files": len(man.files), "bytes": man.total_size},
        "runs": args.runs,
        "scp_command": shlex.join(
            ["scp", "-q", "-r", "<ssh options>", "BUNDLE_DIR", "host:" + SCP_DEST]
        ),
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bundle_push.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    for row in results:
        print(
            f"{row['hosts']} host(s): push {row['push_parallel_verified']['median_s']}s "
            f"vs scp {row['scp_sequential_unverified']['median_s']}s (x{row['speedup_vs_scp']}), "
            f"scp aes-gcm {row['scp_sequential_unverified_aes128gcm']['median_s']}s "
            f"(x{row['speedup_vs_scp_aes128gcm']}); "
            f"no-op push {row['push_noop_already_there']['median_s']}s"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
