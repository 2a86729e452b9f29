"""The deployment plan as a revision keeps it: what each host ran, written when the revision was
made and read back by `installer plan --revision R` and `installer plan --diff`.

A record, not the plan object: a revision must stay readable after the installer that made it
changed its classes, so it holds plain data (hosts, their engines' units, ports, argv, devices
and environment, their CPU count and gateway workers, the gateways' upstreams, Redis, the weights,
and where the hardware came from).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from installer.planning.plan import DeploymentPlan, max_model_len_of, with_cpu_counts

PLAN_FILE = "plan.json"
VERSION = 1


def record(p: DeploymentPlan) -> dict[str, Any]:
    """Plain, JSON-ready data of `p`; `load(dump(record(p))) == record(p)`."""
    return {
        "version": VERSION,
        "deployment": p.inventory.deployment,
        "hardware": p.hardware,
        "cross_host": p.cross_host,
        "hosts": [
            {
                "name": h.name,
                "address": h.host.address,
                "groups": list(h.groups),
                "engines": [
                    {"name": n, "unit": e.unit, "port": e.port, "model": e.model_key, "stage": e.stage,
                     "devices": e.devices, "cpus": e.cpus, "env": dict(e.env), "argv": list(e.argv)}
                    for n, e in zip(h.engine_names, h.engines, strict=True)
                ],
                "ray": None if h.ray is None else h.ray.as_vars(),
                "cpu_count": h.cpu_count,
                "gateway_workers": h.gateway_workers,
            }
            for h in p.hosts
        ],
        "upstreams": [
            {"name": u.name, "url": u.url, "model": u.model, "task": u.task, "stage": u.stage,
             "max_model_len": u.max_model_len}
            for u in p.upstreams
        ],
        "redis": None if p.redis is None else {"host": p.redis.host, "address": p.redis.address,
                                              "port": p.redis.port, "tls": p.redis.tls},
        "weights": p.weights(),
    }


def dump(rec: Mapping[str, Any]) -> str:
    return json.dumps(rec, indent=1, sort_keys=True) + "\n"


def write(folder: Path, p: DeploymentPlan) -> None:
    (folder / PLAN_FILE).write_text(dump(record(p)))


def read(folder: Path) -> dict[str, Any] | None:
    """The record in a revision's snapshot folder; None for a revision made before plans were kept."""
    path = folder / PLAN_FILE
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def cpu_counts(rec: Mapping[str, Any]) -> dict[str, int]:
    """The CPUs preflight counted on each host when the revision was made (none in a record made
    before they were kept)."""
    return {h["name"]: h["cpu_count"] for h in rec["hosts"] if h.get("cpu_count")}


def pinned(p: DeploymentPlan, rec: Mapping[str, Any]) -> DeploymentPlan:
    """`p` with each engine's argv and environment as `rec` recorded them, for the engines the
    record has under the same host, name, unit and port, and each Ray node's argv where the record
    has the same role and unit on the host; the gateways' upstreams take their context length
    from the pinned argv, and the hosts the CPU counts the record has (their gateway workers).

    A rollback must bring back what the revision ran. Rebuilding its plan from its inventory with
    a newer installer can add flags it never ran with (a serving profile's parsers, a new default).
    Engines the record lacks, or that moved, keep the rebuilt values."""
    ran = {(h["name"], e["name"], e["unit"], e["port"]): e for h in rec["hosts"] for e in h["engines"]}

    def engine(host: str, name: str, e: Any) -> Any:
        old = ran.get((host, name, e.unit, e.port))
        if old is None:
            return e
        return dataclasses.replace(e, argv=tuple(old["argv"]), env=tuple(sorted(old["env"].items())))

    rays = {h["name"]: h["ray"] for h in rec["hosts"] if h.get("ray")}

    def ray(host: str, node: Any) -> Any:
        old = rays.get(host)
        if node is None or old is None or (old["role"], old["unit"]) != (node.role, node.unit):
            return node
        return dataclasses.replace(node, argv=tuple(old["argv"]))

    hosts = tuple(
        dataclasses.replace(h, engines=tuple(engine(h.name, n, e) for n, e in zip(h.engine_names, h.engines,
                                                                                   strict=True)),
                            ray=ray(h.name, h.ray))
        for h in p.hosts
    )
    argv = {n: e.argv for h in hosts for n, e in zip(h.engine_names, h.engines, strict=True)}
    upstreams = tuple(dataclasses.replace(u, max_model_len=max_model_len_of(argv[u.name])) if u.name in argv else u
                      for u in p.upstreams)
    return with_cpu_counts(dataclasses.replace(p, hosts=hosts, upstreams=upstreams), cpu_counts(rec))


def lines(rec: Mapping[str, Any]) -> Iterator[str]:
    """The record as lines a person reads and `diff` compares: one per host, engine and upstream."""
    yield f"deployment {rec['deployment']}; hardware: {rec.get('hardware') or '-'}"
    for h in rec["hosts"]:
        workers = f" gateway_workers={h['gateway_workers']}" if h.get("gateway_workers") else ""
        yield f"host {h['name']} {h['address']} groups={','.join(h['groups'])}{workers}"
        for e in h["engines"]:
            env = " ".join(f"{k}={v}" for k, v in sorted(e["env"].items()))
            where = " ".join(x for x in (f"devices={e['devices']}" if e["devices"] else "",
                                         f"cpus={e['cpus']}" if e["cpus"] else "", env) if x)
            yield f"  engine {e['name']} ({e['model']}, {e['stage']}) {e['unit']} :{e['port']} {where}".rstrip()
            yield f"    vllm {' '.join(e['argv'])}"
        if h.get("ray"):
            yield f"  ray {h['ray']['role']}: {' '.join(h['ray']['argv'])}"
    for u in rec["upstreams"]:
        yield f"upstream {u['name']} {u['url']} model={u['model']} task={u['task']} stage={u['stage']}"
    if rec.get("redis"):
        r = rec["redis"]
        yield f"redis {r['host']} {r['address']}:{r['port']} tls={str(r['tls']).lower()}"
    for w in rec["weights"]:
        yield f"weights {w['name']} -> {w['dir_name']} ({w['stage']}) on {','.join(w['hosts'])}"


def diff(old: Mapping[str, Any], new: Mapping[str, Any], old_name: str, new_name: str) -> list[str]:
    """A unified diff of two records' lines; empty when they are the same."""
    return list(difflib.unified_diff(list(lines(old)), list(lines(new)), old_name, new_name, lineterm=""))
