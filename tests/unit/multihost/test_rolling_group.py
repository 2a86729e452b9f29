"""A rolling upgrade moves a Ray group (one model across hosts) as one batch (#36): a head on a new
release beside a worker on the old one cannot form the group."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from installer.day2 import drain, rolling
from installer.inventory import Inventory
from installer.planning import plan_record
from installer.preparation import inventory_checks
from installer.state import revisions


@dataclass(frozen=True)
class _Host:
    name: str


def _names(batches: list[list[_Host]]) -> list[list[str]]:
    return [[h.name for h in b] for b in batches]


def test_a_group_stays_in_one_batch_past_the_batch_size() -> None:
    hosts = [_Host(n) for n in ("a", "h0", "h1", "b", "c")]
    got = rolling.batches(hosts, 1, frozenset({"h0", "h1"}))  # type: ignore[arg-type]
    assert _names(got) == [["a"], ["h0", "h1"], ["b"], ["c"]]
    got = rolling.batches(hosts, 2, frozenset({"h1", "c"}))  # type: ignore[arg-type]
    assert _names(got) == [["a", "h0"], ["h1", "c"], ["b"]]  # the group where its first host comes
    assert _names(rolling.batches(hosts, 2)) == [["a", "h0"], ["h1", "b"], ["c"]]  # type: ignore[arg-type]


def test_the_plan_names_the_ray_group_and_every_member_is_rolled(two_hosts: Callable[..., Inventory]) -> None:
    inv = two_hosts(count=8, preset="deepseek-v3")
    dp = inventory_checks.check_inventory(inv)
    group = rolling.ray_group(dp)
    assert group == {"h0", "h1"}
    serving = drain.serving(inv)
    assert {h.name for h in serving} == group  # the worker is a serving host: the roll reaches it
    assert _names(rolling.batches(serving, 1, group)) == [["h0", "h1"]]


def test_a_group_the_target_dissolves_still_moves_as_one(two_hosts: Callable[..., Inventory], tmp_path: Path) -> None:
    """The hosts run a revision whose plan has a Ray group; the target has none (the model now
    fits one host): the old group's head and worker still go in one batch."""
    dp = inventory_checks.check_inventory(two_hosts(count=8, preset="deepseek-v3"))
    entry = {"deployment": "demo", "number": 1, "bundle_id": "b" * 32, "release_id": "r1", "config_digest": "c1",
             "created": "2026-12-06T00:00:00Z", "bundle_root": "/x"}
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "state.json").write_text(json.dumps({"deployments": {"demo": {
        "revisions": [entry], "hosts": {"h0": 1, "h1": 1}, "runs": []}}}))
    snapshot = revisions.Revision(**entry).snapshot
    snapshot.mkdir(parents=True)
    (snapshot / "inventory.json").write_text("{}")
    plan_record.write(snapshot, dp)
    target = SimpleNamespace(hosts=())  # no host with a Ray node
    assert rolling.ray_hosts(target, "demo", {"h0": 1, "h1": 1}) == {"h0", "h1"}  # type: ignore[arg-type]
    assert rolling.ray_hosts(target, "demo", {"h0": 2}) == frozenset()  # type: ignore[arg-type]  # no such revision
