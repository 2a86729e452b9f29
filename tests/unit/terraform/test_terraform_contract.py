"""The host contract: `terraform output -json` of any provider module -> inventory hosts."""

from typing import Any

import pytest

from installer.terraform import contract
from installer.terraform.errors import TerraformError


def _outputs(hosts: Any, version: Any = 1) -> dict[str, Any]:
    return {
        "contract_version": {"sensitive": False, "type": "number", "value": version},
        "hosts": {"sensitive": False, "type": ["tuple", []], "value": hosts},
    }


def _host(**over: Any) -> dict[str, Any]:
    base = {
        "name": "demo-1",
        "public_address": "54.1.2.3",
        "private_address": "10.80.1.5",
        "ssh_user": "ubuntu",
        "gpu_type": "NVIDIA A10G",
        "gpu_count": 4,
    }
    return base | over


def test_parse_and_convert_public_and_private() -> None:
    found = contract.parse(_outputs([_host(), _host(name="demo-2", public_address=None)]))
    assert found[0] == contract.ProvisionedHost(
        "demo-1", "54.1.2.3", "10.80.1.5", "ubuntu", "NVIDIA A10G", 4
    )
    hosts = contract.to_inventory_hosts(found, public=True)
    assert [h.address for h in hosts] == ["54.1.2.3", "10.80.1.5"]  # no public address: private
    assert hosts[0].ssh.user == "ubuntu"
    private = contract.to_inventory_hosts(found, public=False)
    assert [h.address for h in private] == ["10.80.1.5", "10.80.1.5"]


def test_no_outputs_yet_means_no_hosts() -> None:
    assert contract.parse({}) == []


def test_empty_strings_and_null_gpu_are_none() -> None:
    (h,) = contract.parse(_outputs([_host(public_address="", gpu_type=None, gpu_count=None)]))
    assert h.public_address is None and h.gpu_type is None and h.gpu_count is None


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"hosts": {"value": []}}, "lack 'contract_version'"),
        (_outputs([], version=2), "host contract version 2 is not 1"),
        (_outputs({"demo-1": {}}), "must be a list"),
        (_outputs([{"name": "x"}]), "hosts[0]: missing public_address, private_address"),
        (_outputs([_host(gpu_count=1.5)]), "hosts[0].gpu_count: 1.5 is not a whole number"),
        (_outputs([_host(public_address=None, private_address=None)]), "at least one address"),
    ],
)
def test_broken_outputs_name_the_problem(outputs: dict[str, Any], message: str) -> None:
    with pytest.raises(TerraformError) as err:
        contract.parse(outputs)
    assert message in "\n".join([str(err.value), *err.value.details])


def test_a_name_that_is_no_inventory_host_name_is_reported() -> None:
    found = contract.parse(_outputs([_host(name="Demo_1")]))
    with pytest.raises(TerraformError, match="'Demo_1' is not a valid inventory host"):
        contract.to_inventory_hosts(found, public=True)
