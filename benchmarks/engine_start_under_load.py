"""How long one engine restart takes to its first answer while clients send requests through the
gateways, by the shape of that load: unpaced (the workers send as fast as the answers come) or
paced to a few requests a second, against no load at all. The variants alternate, each round in
a new order; medians are reported.

Why it matters: the day-2 tests restart engines under load, and on the lab's shared cores a
restarting engine gets only the part of the CPU that the serving engines, the gateways and the
client leave it.

Runs against a deployed lab (`installer lab up` then `installer up`); restarts the first host's
engine once per variant and round.

    .venv/bin/python benchmarks/engine_start_under_load.py -i LAB.yml [--rounds 2]
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
from installer import keys, keys_push, prove  # noqa: E402
from installer.inventory import load_inventory  # noqa: E402
from installer.ssh import Target, targets  # noqa: E402
from tests.e2e.load import Load  # noqa: E402

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
           hosts: int, rounds: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    out = HERE / "results" / f"engine_start_under_load-{stamp}"
    median = {v: statistics.median(s) for v, s in found.items()}
    result = {"hosts": hosts, "cpus": os.cpu_count(), "rounds": rounds, "stamp": stamp,
              "seconds_to_first_answer": found, "answers_meanwhile": answered, "failed_meanwhile": failed,
              "median": median}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Engine start under load, {hosts} lab hosts, {os.cpu_count()} CPUs, {stamp} UTC", "",
             "Seconds from `systemctl restart private-llm-engine` on the first host to its first answer,"
             f" while the load ran through every gateway; {rounds} rounds, variants alternating.", "",
             "| load | median s | rounds |", "|---|---|---|"]
    lines += [f"| {v} | {median[v]:.1f} | {', '.join(f'{s:.1f}' for s in found[v])} |" for v in VARIANTS]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of load before the restart")
    args = ap.parse_args()
    inv = load_inventory(args.inventory)
    first = targets(inv)[0]
    urls = [f"{prove.gateway_base(inv, h.address)}/v1" for h in inv.hosts]
    probe = ["python3", "-c", PROBE, inv.hosts[0].address, str(inv.ports.engine), inv.model.served_name]
    found: dict[str, list[float]] = {v: [] for v in VARIANTS}
    answered: dict[str, list[int]] = {v: [] for v in VARIANTS}
    failed: dict[str, list[int]] = {v: [] for v in VARIANTS}
    name = f"bench-start-{int(time.time())}"
    secret = keys.create(name, rpm=100_000)[1]
    keys_push.push(inv)
    try:
        for r in range(args.rounds):
            order = list(VARIANTS)[r % len(VARIANTS):] + list(VARIANTS)[:r % len(VARIANTS)]
            for variant in order:
                took, ok, bad = _restart_under(variant, first, probe, urls, secret, prove.ca_file(inv),
                                          inv.model.served_name, args.warmup)
                found[variant].append(took)
                answered[variant].append(ok)
                failed[variant].append(bad)
                print(f"round {r + 1}, {variant}: first answer {took:.1f} s after the restart "
                      f"({ok} answers, {bad} failed meanwhile)", flush=True)
                time.sleep(5)
    finally:
        keys.revoke(name)
        keys_push.push(inv)
    print(f"written {_write(found, answered, failed, len(inv.hosts), args.rounds)}.md/.json")


if __name__ == "__main__":
    main()
