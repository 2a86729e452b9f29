"""Where an `installer up` spent its configure time, task by task, from ansible-runner's events.

Reads the job events a run left under `.installer/runs/<run>/ansible/artifacts/*/job_events/`
(the same data Ansible's profile_tasks callback prints): each task's wall time is from its
start event to the next task's, so the time between tasks (connection setup, handlers, fact
gathering, the controller's own templating) is counted too. Per role totals follow.

    .venv/bin/python benchmarks/up_profile.py RUN_DIR [--top 25] [--json OUT]
"""

import argparse
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def profile(run_dir: Path) -> dict:
    events = []
    for path in run_dir.glob("ansible/artifacts/*/job_events/*.json"):
        events.append(json.loads(path.read_text()))
    events.sort(key=lambda e: e.get("counter", 0))
    starts = [e for e in events if e.get("event") in ("playbook_on_task_start", "playbook_on_handler_task_start")]
    end = max((_t(e["created"]) for e in events if e.get("created")), default=0.0)
    per_host: dict[str, dict[str, float]] = defaultdict(dict)
    for e in events:
        d = e.get("event_data", {})
        if e.get("event", "").startswith("runner_on_") and d.get("duration") is not None:
            key = d.get("task_uuid", "")
            per_host[key][d.get("host", "")] = per_host[key].get(d.get("host", ""), 0.0) + float(d["duration"])
    tasks = []
    for i, e in enumerate(starts):
        d = e["event_data"]
        t0 = _t(e["created"])
        t1 = _t(starts[i + 1]["created"]) if i + 1 < len(starts) else end
        role = d.get("role", "") or "(play)"
        tasks.append({
            "task": d.get("task", ""), "role": role, "wall_s": round(t1 - t0, 2),
            "host_s": {h: round(v, 2) for h, v in per_host.get(d.get("task_uuid", ""), {}).items()},
            "handler": e["event"] == "playbook_on_handler_task_start",
        })
    roles: dict[str, float] = defaultdict(float)
    for t in tasks:
        roles[t["role"]] += t["wall_s"]
    first = min((_t(e["created"]) for e in events if e.get("created")), default=0.0)
    return {
        "run": str(run_dir), "tasks_started": len(tasks), "playbook_wall_s": round(end - first, 2),
        "roles": dict(sorted(((r, round(v, 2)) for r, v in roles.items()), key=lambda x: -x[1])),
        "tasks": tasks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    found = profile(args.run_dir)
    print(f"{found['run']}: {found['tasks_started']} tasks, playbook {found['playbook_wall_s']} s")
    print("per role (wall s):", ", ".join(f"{r} {v}" for r, v in found["roles"].items()))
    for t in sorted(found["tasks"], key=lambda t: -t["wall_s"])[: args.top]:
        hosts = ", ".join(f"{h} {v}" for h, v in sorted(t["host_s"].items()))
        print(f"{t['wall_s']:7.2f} s  {t['role']:<12} {t['task'][:70]:<70} [{hosts}]")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
