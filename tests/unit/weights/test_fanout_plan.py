"""The fan-out's shape: the control machine feeds one host, every other host hangs under an
earlier one, a fetcher's sources never include a later host (no two hosts wait on each other),
a dead host's children re-parent, and the display names the slowest link."""

import pytest

from installer.weights import fanout
from installer.weights.fanout import CONTROL

HOSTS = [f"h{i}" for i in range(1, 8)]


def test_the_control_link_feeds_one_host_and_a_tree_of_degree_two_follows() -> None:
    p = fanout.plan(HOSTS, degree=2)
    assert p.children(CONTROL) == ["h1"]
    assert p.children("h1") == ["h2", "h3"]
    assert p.children("h2") == ["h4", "h5"]
    assert p.children("h3") == ["h6", "h7"]
    assert [p.depth(h) for h in HOSTS] == [1, 2, 2, 3, 3, 3, 3]


def test_the_default_is_a_chain() -> None:
    p = fanout.plan(HOSTS[:4])
    assert [p.parent[h] for h in HOSTS[:4]] == [CONTROL, "h1", "h2", "h3"]
    assert p.depth("h4") == 4


def test_sources_are_parent_ancestors_other_earlier_hosts_then_the_control_machine() -> None:
    p = fanout.plan(HOSTS, degree=2)
    assert fanout.sources(p, "h1") == [CONTROL]
    assert fanout.sources(p, "h5") == ["h2", "h1", "h4", "h3", CONTROL]
    for host in HOSTS:  # only earlier hosts: a wait on a source can never come back round
        earlier = set(HOSTS[: HOSTS.index(host)])
        assert set(fanout.sources(p, host)) - {CONTROL} <= earlier
        assert fanout.sources(p, host)[-1] == CONTROL


def test_a_dead_host_s_children_re_parent_to_its_nearest_living_ancestor() -> None:
    p = fanout.replan(fanout.plan(HOSTS, degree=2), {"h2"})
    assert p.order == ("h1", "h3", "h4", "h5", "h6", "h7")
    assert p.parent["h4"] == p.parent["h5"] == "h1"
    assert p.children(CONTROL) == ["h1"]


def test_a_dead_seed_leaves_one_host_under_the_control_machine() -> None:
    p = fanout.replan(fanout.plan(HOSTS, degree=2), {"h1"})
    assert p.children(CONTROL) == ["h2"]  # the control link still carries one copy
    assert p.parent["h3"] == "h2"
    assert p.parent["h4"] == "h2" and p.parent["h6"] == "h3"


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        fanout.plan(HOSTS, degree=0)
    with pytest.raises(ValueError, match="distinct"):
        fanout.plan(["h1", "h1"])
    with pytest.raises(ValueError, match="distinct"):
        fanout.plan([CONTROL, "h1"])


def test_the_display_shows_bytes_per_host_and_the_bottleneck_link() -> None:
    links = [
        fanout.Link(CONTROL, "h1", 4_000_000_000, 4_000_000_000, 4.0),
        fanout.Link("h1", "h2", 2_000_000_000, 4_000_000_000, 4.0),
        fanout.Link("h1", "h3", 3_000_000_000, 4_000_000_000, 4.0),
    ]
    lines = fanout.progress_lines(links)
    assert lines[0] == "h1 <- control: 4.00 of 4.00 GB, 1000 MB/s"
    assert lines[1] == "h2 <- h1: 2.00 of 4.00 GB, 500 MB/s"
    assert lines[-1] == "bottleneck: h1 -> h2 at 500 MB/s"  # the finished link is not it


def test_the_serving_unit_is_transient_with_a_deadline_and_no_secret_in_argv() -> None:
    argv = fanout.serve_unit_argv(
        "r20261206-1", "/usr/bin/python3", "/var/lib/private-llm/weights/serve.py",
        ["--bind", "10.0.0.2", "--token-file", "/run/private-llm/fanout.token"], 900)
    assert argv[:4] == ["systemd-run", "--unit=private-llm-weights-serve-r20261206-1", "--collect", "--quiet"]
    assert "--property=RuntimeMaxSec=900" in argv
    assert argv[-1] == "--deadline-s=900"  # the server stops itself too, whoever started it
    assert "--token-file" in argv and not any("Bearer" in a for a in argv)
    with pytest.raises(ValueError, match="run id"):
        fanout.serve_unit_argv("x; rm -rf /", "/usr/bin/python3", "s", [], 1)
