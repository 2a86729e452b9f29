"""What idle engines cost the machine: CPU seconds their processes use while no client sends a
request, with the gateways' checks as they ship (a real token every `health_deep_interval_s`,
vLLM's /health between) against a real token at every check (the earlier behaviour), and with
the gateways stopped. The modes alternate, each round in a new order; medians are reported.

Runs against a deployed lab (`installer lab up` then `installer up`); each host's gateway config
is restored and the gateway restarted at the end.

    .venv/bin/python benchmarks/idle_engines.py -i LAB.yml [--rounds 3] [--window 30]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from installer.hosts.ssh import Target, targets  # noqa: E402
from installer.inventory import load_inventory  # noqa: E402

CONFIG = "/etc/private-llm/gateway.yml"
# CPU ticks of every engine process on the host (vLLM's API server, engine core and workers).
TICKS = ("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
         "case \"$c\" in *vllm.entrypoints*|VLLM::*) awk '{s+=$14+$15} END {print s}' $p/stat;; esac; "
         "done | awk '{s+=$1} END {print s+0}'")
# health_deep_interval_s per mode: at most the check interval makes every check a real request;
# None: as the gateway ships; 0: the gateways stopped.
MODES = {"real token every check": 0.001, "as shipped (real token every 30 s)": None, "gateways stopped": 0}


def _ssh(t: Target, command: str) -> str:
    return subprocess.run(t.ssh_argv(command), check=True, capture_output=True, text=True).stdout


def _on_all(hosts: list[Target], command: str) -> list[str]:
    with ThreadPoolExecutor(len(hosts)) as pool:
        return list(pool.map(lambda t: _ssh(t, command), hosts))


def _set_mode(hosts: list[Target], originals: list[str], deep: float | None) -> None:
    def one(pair: tuple[Target, str]) -> None:
        t, text = pair
        if deep == 0:
            _ssh(t, "systemctl stop private-llm-gateway.socket private-llm-gateway.service")
            return
        body = text if deep is None else text + f"\nhealth_deep_interval_s: {deep}\n"
        # A lab host's systemd sometimes fails a start right after a stop (status 219/CGROUP, its
        # container's cgroup), and starts it again at once: so the service is asked again.
        restart = "systemctl restart private-llm-gateway.socket private-llm-gateway.service"
        subprocess.run(t.ssh_argv(f"cat > {CONFIG} && {{ {restart} || {{ sleep 2; {restart}; }}; }}"),
                       input=body, text=True, check=True, capture_output=True)

    with ThreadPoolExecutor(len(hosts)) as pool:
        list(pool.map(one, zip(hosts, originals, strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=15.0, help="seconds after a gateway restart")
    # several of the shipped 30 s cycles of real tokens, so a window is not all /health by chance
    ap.add_argument("--window", type=float, default=90.0, help="seconds measured")
    args = ap.parse_args()
    hosts = targets(load_inventory(args.inventory))
    hz = os.sysconf("SC_CLK_TCK")
    originals = _on_all(hosts, f"cat {CONFIG}")
    assert not any("health_deep_interval_s" in o for o in originals), "a mode left over from a killed run"
    active = _on_all(hosts, "systemctl is-active private-llm-gateway.service || true")
    assert all(a.strip() == "active" for a in active), f"gateways not running (a killed run?): {active}"
    found: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        for r in range(args.rounds):
            order = list(MODES)[r % len(MODES):] + list(MODES)[:r % len(MODES)]
            for mode in order:
                _set_mode(hosts, originals, MODES[mode])
                time.sleep(args.settle)
                before, t0 = sum(int(x) for x in _on_all(hosts, TICKS)), time.monotonic()
                load = os.getloadavg()[0]
                time.sleep(args.window)
                ticks = sum(int(x) for x in _on_all(hosts, TICKS)) - before
                used = ticks / hz / (time.monotonic() - t0)
                found[mode].append(round(used, 3))
                print(f"round {r + 1}, {mode}: engines used {used:.2f} CPUs (load before {load:.1f})", flush=True)
    finally:
        _set_mode(hosts, originals, None)
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    out = HERE / "results" / f"idle_engines-{stamp}"
    result = {"hosts": len(hosts), "cpus": os.cpu_count(), "window_s": args.window, "settle_s": args.settle,
              "rounds": args.rounds, "stamp": stamp,
              "cpus_used_by_engines": found, "median": {m: statistics.median(v) for m, v in found.items()}}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Idle engines, {len(hosts)} lab hosts, {os.cpu_count()} CPUs, {stamp} UTC", "",
             f"CPUs used by every engine process of the lab over {args.window:.0f} s with no client request,"
             f" {args.rounds} rounds, modes alternating.", "",
             "| gateways' checks | median CPUs | rounds |", "|---|---|---|"]
    lines += [f"| {m} | {result['median'][m]:.2f} | {', '.join(f'{v:.2f}' for v in found[m])} |" for m in MODES]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"written {out}.md/.json")


if __name__ == "__main__":
    main()
