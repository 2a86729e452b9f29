"""`installer status` names a broken member of a model's Ray cluster (#36 item 2): each Ray
host's private-llm-ray unit asked over SSH (the remote layer stood in at its edge,
remote.run_one), the state on the head's engine row and each member that is down under the table.
A deployment without a Ray cluster is not asked at all."""

from collections.abc import Callable, Sequence

from installer.hosts import remote
from installer.hosts.ssh import Target
from installer.inventory import Inventory
from installer.status import Column, Context, Row, collect
from installer.status.ray import PROBE, TABLE_PROBE, RayCollector, firewall_state, member_state, table_state


class Units:
    """What `systemctl show -p ActiveState,SubState,NRestarts` answers on each host."""

    def __init__(self, states: dict[str, str], unreachable: tuple[str, ...] = ()) -> None:
        self.states, self.unreachable = states, unreachable
        self.asked: list[str] = []

    def __call__(self, t: Target, command: str, **_kw: object) -> remote.Result:
        assert command == PROBE
        self.asked.append(t.name)
        if t.name in self.unreachable:
            return remote.Result(t.name, 255, b"", "ssh: connect to host 10.0.0.2 port 22: No route to host", 3.0)
        return remote.Result(t.name, 0, self.states[t.name].encode(), "", 0.1)


def rows_for(inv: Inventory, units: Units) -> list[Row]:
    report = collect(Context(inv, None), [RayCollector(units)], lambda h: [f"{h.name}-0"])
    return report.rows


def test_both_members_up(two_hosts: Callable[..., Inventory]) -> None:
    units = Units({"h0": "active\nrunning\n0\n", "h1": "active\nrunning\n0\n"})
    h0, h1 = rows_for(two_hosts(), units)
    assert sorted(units.asked) == ["h0", "h1"]
    assert h0.values["ray"] == "2/2 up" and not h0.problems
    assert "ray" not in h1.values  # the worker host runs no engine of its own


def test_a_failed_worker_is_named_with_its_address_and_the_repair(two_hosts: Callable[..., Inventory]) -> None:
    units = Units({"h0": "active\nrunning\n0\n", "h1": "failed\nfailed\n3\n"})
    h0, _ = rows_for(two_hosts(), units)
    assert h0.values["ray"] == "1/2 down"
    (problem,) = h0.problems
    assert problem.startswith("Ray worker h1 (10.0.0.2): private-llm-ray.service failed (failed), restarted 3 time(s)")
    assert "`installer up`" in problem


def test_a_restarting_worker_and_an_unreachable_one_are_down(two_hosts: Callable[..., Inventory]) -> None:
    units = Units({"h0": "active\nrunning\n0\n", "h1": "activating\nauto-restart\n1\n"})
    h0, _ = rows_for(two_hosts(), units)
    assert h0.values["ray"] == "1/2 down" and "activating (auto-restart), restarted 1 time(s)" in h0.problems[0]
    units = Units({"h0": "active\nrunning\n0\n"}, unreachable=("h1",))
    h0, _ = rows_for(two_hosts(), units)
    assert "Ray worker h1 (10.0.0.2): no answer over SSH: ssh: connect to host" in h0.problems[0]


def test_no_ray_cluster_no_ssh(two_hosts: Callable[..., Inventory]) -> None:
    # DeepSeek-V3 fits one host of 8 x H200: a replica per host, no Ray
    units = Units({})
    rows = rows_for(two_hosts(gpu="h200"), units)
    assert units.asked == [] and all("ray" not in r.values for r in rows)


def test_a_member_without_its_firewall_is_named(two_hosts: Callable[..., Inventory]) -> None:
    units = Units({"h0": "active\nrunning\n0\nfirewall=active\n", "h1": "active\nrunning\n0\nfirewall=inactive\n"})
    h0, _ = rows_for(two_hosts(), units)
    assert h0.values["ray"] == "2/2 up"  # Ray runs; its ports are open to everyone
    (problem,) = h0.problems
    assert problem.startswith("Ray worker h1 (10.0.0.2): private-llm-ray-firewall.service inactive: Ray's ports")
    assert "`installer up`" in problem


class NotReady:
    """ReadinessCollector's verdict as it leaves it on the rows: the gateway took the engine out."""

    columns: Sequence[Column] = ()

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        for row in rows:
            row.values["ready"] = False


def test_a_group_out_of_rotation_with_every_ray_unit_up_points_at_the_engine(
    two_hosts: Callable[..., Inventory]
) -> None:
    units = Units({h: "active\nrunning\n0\nfirewall=active\n" for h in ("h0", "h1")})
    report = collect(Context(two_hosts(), None), [NotReady(), RayCollector(units)], lambda h: [f"{h.name}-0"])
    h0 = report.rows[0]
    (problem,) = h0.problems
    assert "spans hosts h0, h1" in problem and "RayWorkerProc rank=N died unexpectedly" in problem
    assert "journalctl -u private-llm-engine` on h0" in problem
    # a member down explains it already: no second guess
    units = Units({"h0": "active\nrunning\n0\nfirewall=active\n", "h1": "failed\nfailed\n3\nfirewall=active\n"})
    report = collect(Context(two_hosts(), None), [NotReady(), RayCollector(units)], lambda h: [f"{h.name}-0"])
    assert len(report.rows[0].problems) == 1 and "Ray worker h1" in report.rows[0].problems[0]


def test_the_firewall_line_leaves_the_units_values_alone() -> None:
    # the firewall line comes last and never breaks the three values member_state reads
    text = "active\nrunning\n2\nfirewall=failed\n"
    assert member_state(text) == (True, "active (running), restarted 2 time(s)")
    assert firewall_state(text) == "failed" and firewall_state("active\nrunning\n0\n") is None


def test_an_active_firewall_unit_without_its_table_is_named_with_the_fix(two_hosts: Callable[..., Inventory]) -> None:
    # an outside `nft flush ruleset`: the oneshot unit stays "active", the kernel holds no rules
    up = "active\nrunning\n0\nfirewall=active\n"
    units = Units({"h0": up + "table=present\n", "h1": up + "table=absent\n"})
    h0, _ = rows_for(two_hosts(), units)
    assert h0.values["ray"] == "2/2 up"
    (problem,) = h0.problems
    assert problem.startswith("Ray worker h1 (10.0.0.2): private-llm-ray-firewall.service is active but "
                              "nftables has no table inet pli_ray")
    assert "`systemctl restart private-llm-ray-firewall` on h1, or `installer up`" in problem
    # the table left without its rules (`nft flush table inet pli_ray`), on the head this time
    units = Units({"h0": up + "table=empty\n", "h1": up + "table=present\n"})
    (problem,) = rows_for(two_hosts(), units)[0].problems
    assert problem.startswith("Ray head h0 (10.0.0.1): private-llm-ray-firewall.service is active but "
                              "table inet pli_ray has lost its rules")


def test_a_unit_down_is_named_once_whatever_its_table() -> None:
    # ExecStop deleted the table: the unit's line says it all, no second line for the table
    text = "active\nrunning\n0\nfirewall=inactive\ntable=absent\n"
    assert member_state(text) == (True, "active (running)")
    assert firewall_state(text) == "inactive" and table_state(text) == "absent"
    assert table_state("active\nrunning\n0\nfirewall=active\n") is None


def test_the_probe_asks_for_the_table_as_root_with_the_unit(two_hosts: Callable[..., Inventory]) -> None:
    # one SSH call per member carries both questions (tests/integration/test_ray_firewall.py runs
    # TABLE_PROBE against real nftables)
    assert PROBE.endswith(TABLE_PROBE) and "nft list table inet pli_ray" in TABLE_PROBE
    units = Units({h: "active\nrunning\n0\nfirewall=active\ntable=present\n" for h in ("h0", "h1")})
    h0, _ = rows_for(two_hosts(), units)
    assert not h0.problems and sorted(units.asked) == ["h0", "h1"]
