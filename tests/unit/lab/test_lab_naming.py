"""Lab names, interface names and address allocation: inputs -> expected outputs."""

from ipaddress import IPv4Network

import pytest

from installer.base.errors import LabError
from installer.lab import naming

VALID_NAMES = ["lab", "a", "lctest", "ci", "lab2", "x1y2z3"]
INVALID_NAMES = [
    "",  # empty
    "toolong",  # 7 chars: plv-toolong-1000 would not fit in 15
    "Lab",  # uppercase
    "2lab",  # leading digit
    "la-b",  # dash: it separates lab and host index in interface names
    "la_b",
    "lab ",
    "model",  # the shared model directory sits next to the labs
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_names(name: str) -> None:
    assert naming.validate_name(name) == name


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_names_say_what_is_allowed(name: str) -> None:
    with pytest.raises(LabError, match="lowercase letters or digits"):
        naming.validate_name(name)


BAD_SUBNETS = [
    ("10.213.0.5/24", "host bits set"),
    ("10.213.0.0/29", "between /8 and /28"),
    ("8.8.8.0/24", "not a private range"),
    ("127.0.0.0/24", "not a private range"),
    ("169.254.0.0/24", "not a private range"),
    ("fd00::/64", "not IPv4"),
    ("banana", "invalid lab subnet"),
]


@pytest.mark.parametrize(("subnet", "message"), BAD_SUBNETS)
def test_bad_subnets_are_refused(subnet: str, message: str) -> None:
    with pytest.raises(LabError, match=message):
        naming.parse_subnet(subnet)


@pytest.mark.parametrize(
    ("subnet", "capacity"),
    [("10.213.0.0/24", 244), ("10.213.9.0/28", 4), ("192.168.50.0/27", 20), ("10.0.0.0/16", 9999)],
)
def test_capacity_counts_from_dot_11_to_before_broadcast(subnet: str, capacity: int) -> None:
    assert naming.max_hosts(IPv4Network(subnet)) == capacity


def test_plan_allocates_control_dot_1_and_hosts_from_dot_11() -> None:
    plan = naming.plan("lab", "10.213.0.0/24", 3)
    assert plan.control_address == "10.213.0.1"
    assert plan.bridge == "plb-lab"
    assert [(h.name, h.address, h.netns, h.veth) for h in plan.hosts] == [
        ("lab1", "10.213.0.11", "pli-lab-1", "plv-lab-1"),
        ("lab2", "10.213.0.12", "pli-lab-2", "plv-lab-2"),
        ("lab3", "10.213.0.13", "pli-lab-3", "plv-lab-3"),
    ]
    assert plan.cidr(plan.hosts[0].address) == "10.213.0.11/24"


def test_last_host_of_a_24_is_dot_254() -> None:
    plan = naming.plan("lab", "10.213.0.0/24", 244)
    assert plan.hosts[-1].address == "10.213.0.254"


@pytest.mark.parametrize(
    ("subnet", "hosts"), [("10.213.0.0/24", 0), ("10.213.0.0/24", 245), ("10.213.9.0/28", 5)]
)
def test_host_counts_outside_the_subnet_are_refused(subnet: str, hosts: int) -> None:
    with pytest.raises(LabError, match="--hosts must be between 1 and"):
        naming.plan("lab", subnet, hosts)


def test_interface_names_fit_the_kernel_limit_for_the_longest_names() -> None:
    plan = naming.plan("abcdef", "10.0.0.0/16", 9999)
    longest = [plan.bridge, plan.hosts[-1].veth, plan.hosts[-1].netns]
    assert all(len(n) <= 15 for n in longest), longest


def test_patterns_do_not_match_a_lab_whose_name_extends_ours() -> None:
    # `lab` must never claim the namespaces or links of lab `lab2`.
    assert naming.netns_pattern("lab").fullmatch("pli-lab-1")
    assert not naming.netns_pattern("lab").fullmatch("pli-lab2-1")
    assert naming.veth_pattern("lab").fullmatch("plv-lab-12")
    assert not naming.veth_pattern("lab").fullmatch("plv-lab2-1")
