"""frontend: in the inventory (#37 item 1): what `validate` refuses, at the setting's file and
line, and what a valid one changes (the certificate's names, the bundle's packages, the group
vars of the keepalived role)."""

from pathlib import Path

import pytest

from installer.ansible import keepalived_vars
from installer.base.errors import InventoryError
from installer.bundle import os_packages
from installer.inventory import load_inventory
from installer.planning import plan
from installer.preparation.inventory_checks import check_inventory
from installer.tls import store

HOSTS = "hosts:\n  - name: h1\n    address: 10.0.0.1\n  - name: h2\n    address: 10.0.0.2\n"
FRONTEND = "frontend:\n  vip: 10.0.0.100/24\n  name: llm.example.internal\n  router_id: 51\n"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _inventory(tmp_path: Path, body: str) -> Path:
    model = tmp_path / "weights"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    path = tmp_path / "site.yml"
    path.write_text(f"deployment: demo\nengine: {{device: cpu}}\nmodel: {{path: {model}, served_name: tiny}}\n" + body)
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(path))
    return list(err.value.details)


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_valid_frontend_reaches_certificate_bundle_and_role(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, HOSTS + FRONTEND))
    deployment = check_inventory(inv)
    for host in inv.hosts:
        dns, addresses = store.host_names(inv, host)
        assert "10.0.0.100" in addresses and "llm.example.internal" in dns
    assert "keepalived" in os_packages.wanted(inv)["serving"]
    found = keepalived_vars.group_vars(deployment)
    assert found["keepalived_peers"] == {"h1": "10.0.0.1", "h2": "10.0.0.2"}
    assert found["keepalived_priorities"]["h1"] > found["keepalived_priorities"]["h2"]
    assert found["keepalived_vip"] == "10.0.0.100/24" and found["keepalived_router_id"] == 51
    hp = deployment.serving()[0]
    assert keepalived_vars.host_vars(deployment, hp.gateway_url) == {
        "keepalived_check_url": "https://10.0.0.1:8080/readyz",
        "keepalived_check_ca": "/etc/private-llm/tls/ca.pem",
    }


def test_no_frontend_changes_nothing(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, HOSTS))
    deployment = plan.build(inv)
    assert keepalived_vars.group_vars(deployment) == {}
    assert "frontend" not in inv.model_dump(mode="json")  # an older revision's config digest holds
    assert "keepalived" not in os_packages.wanted(inv).get("serving", [])
    assert store.host_names(inv, inv.hosts[0]) == (["h1"], ["10.0.0.1"])


def test_vip_outside_the_hosts_subnet_is_refused_at_the_host(tmp_path: Path) -> None:
    path = _inventory(tmp_path, HOSTS.replace("10.0.0.2", "10.0.1.2") + FRONTEND)
    (problem,) = _problems(path)
    assert f"site.yml:{_line_of(path, '10.0.1.2')}" in problem
    assert "not on the virtual IP's subnet 10.0.0.0/24" in problem and "h2" in problem


def test_a_single_gateway_host_is_refused(tmp_path: Path) -> None:
    hosts = HOSTS + "    groups: [monitoring]\n"  # h2, the last host
    path = _inventory(tmp_path, hosts + FRONTEND)
    (problem,) = _problems(path)
    assert f"site.yml:{_line_of(path, 'frontend:')}" in problem and "at least 2 gateway (serving) hosts" in problem


def test_a_vip_that_is_a_hosts_address_is_refused(tmp_path: Path) -> None:
    path = _inventory(tmp_path, HOSTS + FRONTEND.replace("10.0.0.100/24", "10.0.0.2/24"))
    (problem,) = _problems(path)
    assert f"site.yml:{_line_of(path, 'vip:')}" in problem and "h2" in problem


def test_a_gateway_host_named_by_dns_is_refused(tmp_path: Path) -> None:
    path = _inventory(tmp_path, HOSTS.replace("10.0.0.2", "gpu2.example.internal") + FRONTEND)
    (problem,) = _problems(path)
    assert f"site.yml:{_line_of(path, 'gpu2.example')}" in problem and "needs its IP address" in problem


@pytest.mark.parametrize(("value", "says"), [
    ("10.0.0.100", "has no prefix length"),
    ("10.0.0.0/24", "network address"),
    ("10.0.0.255/24", "broadcast address"),
    ("127.0.0.5/8", "cannot be a client address"),
    ("10.0.0.300/24", "is not an address/prefix"),
    ("2001:db8::100/64", "supports an IPv4 VIP only"),  # the VRRP preflight listens on IPv4 only
])
def test_malformed_vips_are_refused_at_their_line(tmp_path: Path, value: str, says: str) -> None:
    path = _inventory(tmp_path, HOSTS + FRONTEND.replace("10.0.0.100/24", value))
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    text = "\n".join(err.value.details)
    assert f"site.yml:{_line_of(path, 'vip:')}" in text and says in text


@pytest.mark.parametrize("router_id", ["0", "256", "'51'"])
def test_router_id_is_1_to_255(tmp_path: Path, router_id: str) -> None:
    path = _inventory(tmp_path, HOSTS + FRONTEND.replace("router_id: 51", f"router_id: {router_id}"))
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert f"site.yml:{_line_of(path, '  router_id:')}" in "\n".join(err.value.details)


def test_two_frontend_sections_are_refused(tmp_path: Path) -> None:
    path = _inventory(tmp_path, HOSTS + FRONTEND + FRONTEND.replace("51", "52"))
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert "duplicate key" in "\n".join(err.value.details)


def test_a_cloud_provider_is_pointed_to_its_load_balancer(tmp_path: Path) -> None:
    pub = tmp_path / "id.pub"
    pub.write_text("ssh-ed25519 AAAA test\n")
    cloud = (
        "provider: aws\ncloud:\n  region: us-east-1\n  zone: us-east-1a\n  instance_type: g5.xlarge\n"
        f"  image: ami-0123456789abcdef0\n  count: 2\n  allowed_cidrs: [192.0.2.0/24]\n  ssh_public_key: {pub}\n"
    )
    path = _inventory(tmp_path, cloud + FRONTEND)
    (problem,) = _problems(path)
    assert f"site.yml:{_line_of(path, 'frontend:')}" in problem
    assert "AWS Network Load Balancer" in problem and "remove frontend" in problem
