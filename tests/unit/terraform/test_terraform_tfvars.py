"""tfvars and the root module rendered from inventories, checked against the modules' variables."""

import json
from pathlib import Path

import pytest
import yaml

from installer.inventory import load_inventory
from installer.terraform import tfvars
from tests.support.terraform_helpers import PUBLIC_KEY, REPO, cloud_inventory, variables

HOST_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n",
    "ssh-ed25519 AAAAhost",
)


@pytest.mark.parametrize("provider", ["aws", "tencentcloud", "jdcloud"])
def test_rendered_variables_are_exactly_what_the_module_declares(
    provider: str, tmp_path: Path
) -> None:
    inv = cloud_inventory(provider, tmp_path)
    rendered = tfvars.module_vars(inv, HOST_KEY)
    declared = variables(provider)
    assert set(rendered) <= set(declared), set(rendered) - set(declared)
    required = {name for name, body in declared.items() if "default" not in body}
    assert required <= set(rendered), required - set(rendered)


def test_aws_values(tmp_path: Path) -> None:
    inv = cloud_inventory("aws", tmp_path)
    v = tfvars.module_vars(inv, HOST_KEY)
    assert v["name_prefix"] == "gpu-demo" and v["zone"] == "us-east-1b"
    assert v["instance_type"] == "g5.12xlarge" and v["instance_count"] == 2
    assert v["ssh_user"] == "ubuntu" and v["ssh_public_key"] == PUBLIC_KEY
    assert v["system_disk"] == {"size_gb": 200}  # no type: the module's default (gp3)
    assert v["data_disks"] == [{"size_gb": 500, "type": "io2"}]
    assert v["allowed_cidrs"] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert v["allow_ssh_from_anywhere"] is False
    assert (v["ssh_port"], v["gateway_port"]) == (22, 8443)
    assert v["ssh_host_key"] == {"private": HOST_KEY[0], "public": HOST_KEY[1]}
    assert v["gpu"] is None  # the module's table knows g5


def test_tencent_and_jd_specific_values(tmp_path: Path) -> None:
    tc = tfvars.module_vars(cloud_inventory("tencentcloud", tmp_path), HOST_KEY)
    assert tc["instance_charge_type"] == "SPOTPAID" and tc["internet_max_bandwidth_out"] == 50
    jd = tfvars.module_vars(cloud_inventory("jdcloud", tmp_path), HOST_KEY)
    assert jd["public_ip"] is False and jd["gpu"] == {"type": "NVIDIA V100", "count": 1}
    assert jd["eip_provider"] == "bgp" and "ssh_host_key" not in jd  # no user data in jdcloud 1.1.0


def test_workspace_has_no_credentials_and_keeps_the_host_key_sensitive(tmp_path: Path) -> None:
    inv = cloud_inventory("aws", tmp_path)
    workdir = tmp_path / "work"
    tfvars.write(inv, workdir, HOST_KEY)
    root = json.loads((workdir / "main.tf.json").read_text())
    assert root["provider"] == {"aws": {"region": "us-east-1"}}
    assert root["terraform"]["required_providers"] == {"aws": {"source": "hashicorp/aws"}}
    assert root["variable"]["ssh_host_key"] == {"sensitive": True}
    assert root["module"]["hosts"]["source"] == "./module"
    assert root["module"]["hosts"]["zone"] == "${var.zone}"
    assert set(root["output"]) == {"contract_version", "hosts"}
    assert (workdir / "module" / "main.tf").is_file()
    assert json.loads((workdir / "terraform.tfvars.json").read_text())["zone"] == "us-east-1b"
    text = (workdir / "main.tf.json").read_text() + (workdir / "terraform.tfvars.json").read_text()
    for secret_name in ("access_key", "secret_key", "secret_id", "AWS_SECRET"):
        assert secret_name not in text
    assert (workdir / "terraform.tfvars.json").stat().st_mode & 0o077 == 0


def test_aws_endpoint_points_every_call_at_it(tmp_path: Path) -> None:
    inv = cloud_inventory("aws", tmp_path)
    assert inv.cloud is not None
    cloud = inv.cloud.model_copy(update={"endpoint": "http://127.0.0.1:5000"})
    inv = inv.model_copy(update={"cloud": cloud})
    block = tfvars.provider_block(inv)
    assert block["endpoints"] == {"ec2": "http://127.0.0.1:5000", "sts": "http://127.0.0.1:5000"}
    assert block["skip_credentials_validation"] and block["skip_requesting_account_id"]


@pytest.mark.parametrize("name", ["aws", "tencentcloud", "jdcloud", "baremetal"])
def test_example_inventories_validate_and_render(name: str, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "inventory" / f"{name}.example.yml").read_text())
    cloud_inventory("aws", tmp_path)  # lays out weights/ and id_ed25519.pub
    (tmp_path / "id_ed25519").write_text("private\n")
    data["model"]["path"] = "weights"
    data["ssh"]["private_key"] = "id_ed25519"
    if "cloud" in data:
        data["cloud"]["ssh_public_key"] = "id_ed25519.pub"
    site = tmp_path / "site.yml"
    site.write_text(yaml.safe_dump(data))
    inv = load_inventory(site)
    assert inv.provider == name
    if name != "baremetal":
        assert set(tfvars.module_vars(inv, HOST_KEY)) <= set(variables(name))
