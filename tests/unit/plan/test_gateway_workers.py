"""`gateway.workers: auto` is decided by the plan, from the CPUs preflight counted on each host
(installer/planning/plan.py gateway_workers, with_cpu_counts), not by the gateway role: the renderer gives
each serving host its number, a revision's plan keeps the counts, and a rollback's plan takes them
from there. The gateway.yml the role renders from the number is the one `nproc` gave before
(tests/unit/service/test_gateway_role_workers.py)."""

import json
from pathlib import Path
from typing import Any

import pytest

from installer.ansible import render
from installer.inventory.models import Inventory
from installer.planning import plan, plan_record


def inventory(tmp: Path, workers: Any = "auto") -> Inventory:
    (tmp / "model").mkdir(exist_ok=True)
    (tmp / "model" / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo",
        "model": {"path": str(tmp / "model"), "served_name": "m"},
        "hosts": [{"name": "s1", "address": "10.0.0.1"}, {"name": "s2", "address": "10.0.0.2"},
                  {"name": "mon", "address": "10.0.0.3", "groups": ["monitoring"]}],
        "engine": {"device": "cpu"},
        "gateway": {"workers": workers},
    })


@pytest.mark.parametrize(("setting", "cpus", "expected"), [
    ("auto", 2, 1),     # the lab's hosts, and CI
    ("auto", 15, 1),
    ("auto", 16, 2),    # one H200 machine of the device tool
    ("auto", 224, 8),   # an 8-GPU host: capped, the CPUs are the engines'
    ("auto", None, None),  # not counted yet: no preflight ran
    (3, 224, 3),        # the inventory's number wins
    (3, None, 3),
])
def test_the_rule(setting: Any, cpus: int | None, expected: int | None) -> None:
    assert plan.gateway_workers(setting, cpus) == expected


def test_each_serving_host_gets_its_own_number(tmp_path: Path) -> None:
    built = plan.build(inventory(tmp_path))
    assert [h.gateway_workers for h in built.hosts] == [None, None, None]
    assert "gateway_workers" not in render.hosts_yaml(built)["all"]["hosts"]["s1"]

    counted = plan.with_cpu_counts(built, {"s1": 2, "s2": 64, "mon": 32})
    found = render.hosts_yaml(counted)["all"]["hosts"]
    assert (found["s1"]["gateway_workers"], found["s2"]["gateway_workers"]) == (1, 8)
    assert "gateway_workers" not in found["mon"]  # no gateway on a monitoring-only host
    assert counted.host("s2").cpu_count == 64
    # only the hosts changed: the engines and the routes are the built plan's
    assert counted.upstreams == built.upstreams
    assert [h.engines for h in counted.hosts] == [h.engines for h in built.hosts]


def test_a_number_in_the_inventory_needs_no_count(tmp_path: Path) -> None:
    built = plan.build(inventory(tmp_path, workers=5))
    assert render.hosts_yaml(built)["all"]["hosts"]["s1"]["gateway_workers"] == 5
    assert plan.with_cpu_counts(built, {"s1": 224}).host("s1").gateway_workers == 5


def test_a_revision_keeps_the_counts_and_a_rollback_takes_them(tmp_path: Path) -> None:
    counted = plan.with_cpu_counts(plan.build(inventory(tmp_path)), {"s1": 16, "s2": 2})
    rec = json.loads(plan_record.dump(plan_record.record(counted)))
    assert plan_record.cpu_counts(rec) == {"s1": 16, "s2": 2}
    assert "host s1 10.0.0.1 groups=serving gateway_workers=2" in plan_record.lines(rec)

    rebuilt = plan.build(inventory(tmp_path))  # a rollback builds the revision's plan without preflight
    pinned = plan_record.pinned(rebuilt, rec)
    assert [h.gateway_workers for h in pinned.hosts] == [2, 1, None]
    assert plan_record.record(pinned) == rec


def test_a_record_made_before_counts_were_kept_leaves_auto(tmp_path: Path) -> None:
    rebuilt = plan.build(inventory(tmp_path))
    rec = plan_record.record(rebuilt)
    for h in rec["hosts"]:
        del h["cpu_count"], h["gateway_workers"]
    assert plan_record.cpu_counts(rec) == {}
    assert [h.gateway_workers for h in plan_record.pinned(rebuilt, rec).hosts] == [None, None, None]
