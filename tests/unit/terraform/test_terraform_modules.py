"""The provider modules, checked statically: format, conventions, the shared host contract, and
the arguments each provider requires. Tencent Cloud and JD Cloud providers cannot be installed
here (no registry access), so their modules are parsed with python-hcl2 instead of validated;
baremetal (no provider) and aws (filesystem mirror) also go through `terraform validate`."""

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from installer.terraform.contract import FIELDS
from installer.terraform.tfvars import PROVIDER_SOURCES
from tests.support.terraform_helpers import MODULES, REPO, parse_module, unquote, variables

PROVIDERS = ["aws", "tencentcloud", "jdcloud", "baremetal"]
TERRAFORM = shutil.which("terraform") or "terraform"
AWS_MIRROR = Path("/opt/tf-plugins/registry.terraform.io/hashicorp/aws")
needs_terraform = pytest.mark.skipif(
    shutil.which("terraform") is None, reason="terraform is not installed"
)

# Arguments the providers' schemas mark required (or that the resource cannot work without),
# from tencentcloudstack/tencentcloud (resource_tc_*.go, 1.82) and hashicorp/jdcloud 1.1.0 docs.
REQUIRED = {
    "tencentcloud_vpc": {"name", "cidr_block"},
    "tencentcloud_subnet": {"vpc_id", "name", "cidr_block", "availability_zone"},
    "tencentcloud_security_group": {"name"},
    "tencentcloud_security_group_rule_set": {"security_group_id"},
    "tencentcloud_key_pair": {"key_name"},
    # image_id/availability_zone are "AtLeastOneOf" launch_template_id; we use no template.
    "tencentcloud_instance": {
        "availability_zone",
        "image_id",
        "instance_type",
        "key_ids",
        "orderly_security_groups",
        "vpc_id",
        "subnet_id",
    },
    "jdcloud_vpc": {"vpc_name", "cidr_block"},
    "jdcloud_subnet": {"vpc_id", "subnet_name", "cidr_block"},
    "jdcloud_network_security_group": {"network_security_group_name", "vpc_id"},
    "jdcloud_network_security_group_rules": {"security_group_id", "security_group_rules"},
    "jdcloud_key_pairs": {"key_name"},
    "jdcloud_instance": {"az", "instance_name", "instance_type", "image_id", "subnet_id"},
    "jdcloud_eip": {"eip_provider", "bandwidth_mbps"},
    "jdcloud_eip_association": {"instance_id", "elastic_ip_id"},
    "aws_vpc": {"cidr_block"},
    "aws_subnet": {"vpc_id", "cidr_block"},
    "aws_security_group": {"vpc_id"},
    "aws_key_pair": {"public_key"},
    "aws_instance": {"ami", "instance_type", "subnet_id", "vpc_security_group_ids", "key_name"},
}
# Arguments the rules blocks must carry (security_group_rules: JD; ingress/egress: Tencent).
REQUIRED_NESTED = {
    ("jdcloud_network_security_group_rules", "security_group_rules"): {
        "address_prefix",
        "direction",
        "protocol",
    },
    ("tencentcloud_security_group_rule_set", "ingress"): {"action"},
    ("tencentcloud_security_group_rule_set", "egress"): {"action"},
}


def _resources(provider: str) -> dict[str, dict[str, Any]]:
    found = {}
    for block in parse_module(provider).get("resource", []):
        for kind, named in block.items():
            for body in named.values():
                found[unquote(kind)] = body
    return found


def _nested(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Static blocks and the content of dynamic blocks called `name`."""
    blocks = [b for b in body.get(name, []) if isinstance(b, dict)]
    for dyn in body.get("dynamic", []):
        for label, spec in dyn.items():
            if unquote(label) == name:
                blocks.extend(spec.get("content", []))
    return blocks


@needs_terraform
def test_every_module_and_example_is_terraform_fmt_clean() -> None:
    proc = subprocess.run(
        [TERRAFORM, "fmt", "-check", "-recursive", "-diff", str(REPO / "terraform")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("provider", PROVIDERS)
def test_module_layout_and_conventions(provider: str) -> None:
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (MODULES / provider / name).is_file(), f"{provider}/{name} missing"
    for name, body in variables(provider).items():
        assert body.get("description"), f"{provider}: variable {name} has no description"
        assert body.get("type"), f"{provider}: variable {name} has no type"
    for block in parse_module(provider)["output"]:
        for name, body in block.items():
            assert body.get("description"), f"{provider}: output {name} has no description"
    (terraform,) = parse_module(provider)["terraform"]
    assert unquote(terraform["required_version"]) == ">= 1.9"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_hosts_output_follows_the_shared_contract(provider: str) -> None:
    outputs = {
        unquote(k): v for block in parse_module(provider)["output"] for k, v in block.items()
    }
    assert outputs["contract_version"]["value"] == 1
    expression = outputs["hosts"]["value"]
    if match := re.fullmatch(r"\$\{try\(local\.(\w+), \[\]\)\}", expression):
        local_values = {k: v for b in parse_module(provider)["locals"] for k, v in b.items()}
        expression = local_values[match.group(1)]
    # The object built per host: {name = ..., public_address = ..., ...}
    keys = re.findall(r"[{,]\s*(\w+)\s*=", expression)
    assert sorted(keys) == sorted(FIELDS), expression
    if provider != "baremetal":  # null-safe: each field in try() or a plain variable
        for key in FIELDS:
            assert re.search(rf"{key}\s*=\s*(try\(|var\.)", expression), f"{key} is not null-safe"


@pytest.mark.parametrize("provider", ["aws", "tencentcloud", "jdcloud"])
def test_provider_is_pinned_to_the_source_the_installer_renders(provider: str) -> None:
    (terraform,) = parse_module(provider)["terraform"]
    (required,) = terraform["required_providers"]
    spec = required[provider]
    assert unquote(spec["source"]) == PROVIDER_SOURCES[provider]
    assert unquote(spec["version"]).startswith((">=", "="))


@pytest.mark.parametrize("provider", ["aws", "tencentcloud", "jdcloud"])
def test_resources_carry_the_providers_required_arguments(provider: str) -> None:
    resources = _resources(provider)
    assert any(k.endswith("_instance") for k in resources)
    for kind, body in resources.items():
        missing = (
            REQUIRED.get(kind, set())
            - set(body)
            - {unquote(label) for d in body.get("dynamic", []) for label in d}
        )
        assert not missing, f"{provider}: {kind} lacks required {sorted(missing)}"
    for (kind, block), needed in REQUIRED_NESTED.items():
        if kind in resources:
            nested = _nested(resources[kind], block)
            assert nested, f"{kind} has no {block} blocks"
            for b in nested:
                assert needed <= set(b), f"{kind}.{block} lacks {sorted(needed - set(b))}"


@pytest.mark.parametrize("provider", ["aws", "tencentcloud", "jdcloud"])
def test_security_group_opens_only_ssh_and_gateway_to_allowed_cidrs(provider: str) -> None:
    text = (MODULES / provider / "main.tf").read_text()
    # Any rule admitting the world must be a DROP; every accepting rule names a var or the VPC.
    world = [line for line in text.splitlines() if '"0.0.0.0/0"' in line]
    if provider == "aws":
        assert world == ['    cidr_block = "0.0.0.0/0"'], world  # only the internet route
    else:
        assert all("cidr_block" in line for line in world)
        assert text.count('action      = "DROP"') == len(world)
    assert "var.ssh_port" in text and "var.gateway_port" in text and "var.allowed_cidrs" in text


def _validate(
    module: Path, tmp_path: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    work = tmp_path / module.name
    shutil.copytree(module, work)
    init = subprocess.run(
        [TERRAFORM, f"-chdir={work}", "init", "-backend=false", "-input=false", "-no-color"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    return subprocess.run(
        [TERRAFORM, f"-chdir={work}", "validate", "-no-color"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@needs_terraform
def test_baremetal_module_validates(tmp_path: Path) -> None:
    proc = _validate(MODULES / "baremetal", tmp_path, dict(os.environ))
    assert proc.returncode == 0, proc.stderr


@needs_terraform
@pytest.mark.skipif(
    not AWS_MIRROR.is_dir(), reason="no hashicorp/aws filesystem mirror at /opt/tf-plugins"
)
def test_aws_module_inits_offline_from_the_mirror_and_validates(tmp_path: Path) -> None:
    rc = tmp_path / "terraformrc"
    rc.write_text(
        'provider_installation {\n  filesystem_mirror {\n    path = "/opt/tf-plugins"\n  }\n}\n'
    )
    proc = _validate(MODULES / "aws", tmp_path, {**os.environ, "TF_CLI_CONFIG_FILE": str(rc)})
    assert proc.returncode == 0, proc.stderr
