"""The day-2 loop on a lab of its own: first `up`, converged `up` (the verified fast path),
converged `up --full` (Ansible with changed=0), and `lab down`, each timed from the CLI as an
operator runs it, with the phases each `up` reported and where the full run spent its time.
With --strategies, Ansible's two strategies side by side on the same lab, alternating: converged
`up --full` twice each, then an upgrade and a rollback of a vLLM setting under each.

Needs root (the lab). Writes benchmarks/results/day2_loop-<time>.{json,md}.

    sudo .venv/bin/python benchmarks/day2_loop.py --name bench --subnet 10.213.24.0/24 [--hosts 2]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import up_profile  # noqa: E402  (a sibling script, not a package)


def _cli(*args: str, strategy: str = "") -> tuple[float, str, int]:
    env = {**os.environ, "COLUMNS": "200", **({"INSTALLER_ANSIBLE_STRATEGY": strategy} if strategy else {})}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "installer", *args], capture_output=True, text=True,
                       cwd=REPO, env=env, check=False)
    return round(time.monotonic() - start, 1), p.stdout + p.stderr, p.returncode


def _latest_run(state: Path) -> Path:
    return sorted((state / "runs").glob("*-up-*"), key=lambda p: p.stat().st_mtime)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="bench")
    ap.add_argument("--subnet", default="10.213.24.0/24")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--converged-runs", type=int, default=3)
    ap.add_argument("--strategies", action="store_true", help="mitogen against linear, side by side")
    args = ap.parse_args()
    state = REPO / ".installer" / f"bench-{args.name}"
    state.mkdir(parents=True, exist_ok=True)
    os.environ["INSTALLER_STATE_DIR"] = str(state)
    inventory = state / "lab.yml"
    steps: list[dict] = []

    def step(label: str, *cli: str, strategy: str = "") -> dict:
        load = os.getloadavg()[0]
        seconds, out, rc = _cli(*cli, strategy=strategy)
        entry = {"step": label, "seconds": seconds, "rc": rc, "load_before": round(load, 2),
                 "strategy": strategy or "mitogen"}
        if cli[0] == "up":
            run = _latest_run(state)
            summary = json.loads((run / "summary.json").read_text())
            entry |= {"phases_s": summary.get("phases_s"), "configure": summary.get("configure"),
                      "changed": summary.get("changed"), "full_reasons": summary.get("full_reasons"),
                      "run": str(run)}
            if summary.get("configure") == "full":
                found = up_profile.profile(run)
                entry["top_tasks"] = sorted(found["tasks"], key=lambda t: -t["wall_s"])[:12]
                entry["roles_s"] = found["roles"]
        if cli[:2] == ("lab", "down"):
            entry["where"] = next((ln for ln in out.splitlines() if ln.startswith("where the time went")), "")
        print(f"{label}: {seconds} s (rc {rc})", flush=True)
        if rc != 0:
            print(out[-3000:], file=sys.stderr)
        steps.append(entry)
        return entry

    step("lab up", "lab", "up", "--name", args.name, "--subnet", args.subnet, "-n", str(args.hosts),
         "-i", str(inventory))
    try:
        step("first up", "up", "-i", str(inventory))
        for i in range(args.converged_runs):
            step(f"up again #{i + 1}", "up", "-i", str(inventory))
        step("converged up --full (Ansible, changed=0)", "up", "-i", str(inventory), "--full")
        if args.strategies:
            side_by_side(step, inventory, state)
    finally:
        step("lab down", "lab", "down", "--name", args.name)

    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    out = REPO / "benchmarks" / "results" / f"day2_loop-{stamp}"
    found = {"hosts": args.hosts, "cpus": os.cpu_count(), "stamp": stamp, "steps": steps}
    out.with_suffix(".json").write_text(json.dumps(found, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(found))
    print(f"written {out}.md/.json")


def side_by_side(step, inventory: Path, state: Path) -> None:  # type: ignore[no-untyped-def]
    """Each strategy in turn on the same converged lab, so both meet the same load."""
    data = yaml.safe_load(inventory.read_text())
    data["engine"] = {**data.get("engine", {}), "max_num_seqs": 24}
    variant = state / "lab-b.yml"
    variant.write_text(yaml.safe_dump(data, sort_keys=False))
    for strategy in ("linear", "mitogen", "linear", "mitogen"):
        step(f"converged up --full, {strategy}", "up", "-i", str(inventory), "--full", strategy=strategy)
    for strategy in ("linear", "mitogen"):
        step(f"upgrade, {strategy}", "upgrade", "-i", str(variant), strategy=strategy)
        step(f"rollback, {strategy}", "rollback", "-i", str(inventory), strategy=strategy)


def markdown(found: dict) -> str:
    steps = found["steps"]
    lines = [f"# day-2 loop, {found['hosts']} lab hosts, {found['cpus']} CPUs, {found['stamp']} UTC", "",
             "| step | wall s | load before | strategy | configure | changed | phases (s) |",
             "|---|---|---|---|---|---|---|"]
    for s in steps:
        phases = ", ".join(f"{k} {v}" for k, v in (s.get("phases_s") or {}).items())
        lines.append(f"| {s['step']} | {s['seconds']} | {s['load_before']} | {s.get('strategy', '')} | "
                     f"{s.get('configure') or ''} | "
                     f"{s.get('changed', '')} | {phases or s.get('where', '')} |")
        if s.get("full_reasons"):
            lines.append(f"| | | | | why full: {'; '.join(s['full_reasons'][:2])} | | |")
    for s in steps:
        if s.get("top_tasks"):
            lines += ["", f"## {s['step']}: slowest tasks (wall s; per host)", ""]
            lines += [f"- {t['wall_s']} s {t['role']}: {t['task']} {t['host_s']}" for t in s["top_tasks"]]
            lines += ["", "per role: " + ", ".join(f"{r} {v}" for r, v in s["roles_s"].items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
