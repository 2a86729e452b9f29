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
        ["--bind", "10.0.0.2", "--token-file", "${CREDENTIALS_DIRECTORY}/token"], 900,
        {"token": "/var/lib/private-llm/weights/fanout/token"}, ["10.0.0.3"])
    assert argv[:4] == ["systemd-run", "--unit=private-llm-weights-serve-r20261206-1", "--collect", "--quiet"]
    assert "--property=RuntimeMaxSec=900" in argv
    assert argv[-1] == "--deadline-s=900"  # the server stops itself too, whoever started it
    assert "--token-file" in argv and not any("Bearer" in a for a in argv)
    with pytest.raises(ValueError, match="run id"):
        fanout.serve_unit_argv("x; rm -rf /", "/usr/bin/python3", "s", [], 1)


def test_the_serving_unit_runs_as_a_user_of_its_own_in_a_read_only_sandbox() -> None:
    argv = fanout.serve_unit_argv("r1", "/usr/bin/python3", "/s.py", [], 60,
                                  {"tls.key": "/var/lib/private-llm/weights/fanout/tls.key"}, ["10.0.0.3"])
    props = {a.removeprefix("--property=").split("=", 1)[0]: a.split("=", 2)[2]
             for a in argv[: argv.index("--")] if a.startswith("--property=")}
    assert props["DynamicUser"] == "yes" and "User" not in props  # never root
    for hardening in ("ProtectSystem", "NoNewPrivileges", "ProtectHome", "PrivateDevices", "RestrictSUIDSGID"):
        assert props[hardening] in ("strict", "true"), hardening
    assert props["CapabilityBoundingSet"] == "" and props["AmbientCapabilities"] == ""  # no capability at all
    assert props["LoadCredential"] == "tls.key:/var/lib/private-llm/weights/fanout/tls.key"  # root's file stays 0600
    assert props["RuntimeDirectory"] == "private-llm-weights-serve-r1"  # its only writable place
    assert (props["IPAddressDeny"], props["IPAddressAllow"]) == ("any", "localhost 10.0.0.3")
    assert "ReadWritePaths" not in props


FOUR = ["h1", "h2", "h3", "h4"]
ADDRESSES = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3", "h4": "fd00::4"}


def _runs(**kw: object) -> dict[str, dict]:
    return fanout.host_runs(fanout.plan(FOUR), ADDRESSES, "r7", ["model/", "models/org--embed/"],
                            bundle_dir="/var/lib/private-llm/bundles/b1", state_dir="/var/lib/private-llm", **kw)


def _arg(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_each_host_serves_every_weights_folder_on_its_own_address() -> None:
    runs = _runs()
    for host, run in runs.items():
        argv = run["serve_argv"]
        server = argv[argv.index("--") + 1:]
        assert server[:3] == ["/usr/bin/python3", "-I", "/var/lib/private-llm/weights/serve.py"]
        assert _arg(server, "--bind") == [ADDRESSES[host]] and "--port=8471" in server
        assert _arg(server, "--under") == ["model/", "models/org--embed/"]
        assert _arg(server, "--root") == ["/var/lib/private-llm/bundles/b1"]
        assert _arg(server, "--key") == ["${CREDENTIALS_DIRECTORY}/tls.key"]
        allow = next(a for a in argv if a.startswith("--property=IPAddressAllow="))
        # the fan-out's hosts, itself included (the role's wait_for comes from its own address)
        assert allow.split("=", 2)[2].split() == ["localhost", *ADDRESSES.values()]
    assert runs["h1"]["seed"] and not runs["h2"]["seed"]


def test_the_seed_fetches_nothing_and_the_others_fetch_each_folder_from_earlier_hosts() -> None:
    runs = _runs(wait_s=30)
    assert runs["h1"]["fetch"] == []  # the push gave it the weights, once through the control link
    h4 = runs["h4"]["fetch"]
    assert [f["prefix"] for f in h4] == ["model/", "models/org--embed/"]
    argv = h4[1]["argv"]
    assert argv[3] == "fetch" and _arg(argv, "--prefix") == ["models/org--embed/"]
    assert _arg(argv, "--root") == ["/var/lib/private-llm/bundles/b1/models/org--embed"]
    assert _arg(argv, "--url") == [  # chain: parent h3, then h2, then h1; never the control machine
        "https://10.0.0.3:8471/models/org--embed/", "https://10.0.0.2:8471/models/org--embed/",
        "https://10.0.0.1:8471/models/org--embed/"]
    assert runs["h4"]["sources"] == ["h3", "h2", "h1"]
    assert "--wait-s=30" in argv and _arg(argv, "--token-file") == ["/var/lib/private-llm/weights/fanout/token"]
    assert _runs()["h2"]["fetch"][0]["argv"][_runs()["h2"]["fetch"][0]["argv"].index("--url") + 1] == (
        "https://10.0.0.1:8471/model/")
    assert fanout.url("fd00::4", 8471, "model/") == "https://[fd00::4]:8471/model/"


@pytest.mark.parametrize(("prefixes", "addresses", "why"), [
    (["model"], ADDRESSES, "ending in '/'"),
    (["../etc/"], ADDRESSES, "ending in '/'"),
    (["/model/"], ADDRESSES, "ending in '/'"),
    ([], ADDRESSES, "ending in '/'"),
    (["model/"], {**ADDRESSES, "h3": ""}, "without a deployment address: h3"),
])
def test_bad_folders_or_a_host_without_an_address_are_refused(
    prefixes: list[str], addresses: dict[str, str], why: str,
) -> None:
    with pytest.raises(ValueError, match=why):
        fanout.host_runs(fanout.plan(FOUR), addresses, "r7", prefixes, bundle_dir="/b", state_dir="/s")
