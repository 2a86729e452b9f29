"""A rolling upgrade moves a Ray group (one model across hosts) as one batch (#36): a head on a new
release beside a worker on the old one cannot form the group."""

from collections.abc import Callable
from dataclasses import dataclass

from installer.day2 import drain, rolling
from installer.inventory import Inventory
from installer.preparation import inventory_checks


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
