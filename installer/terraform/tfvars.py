"""Render a deployment's Terraform root module and tfvars from the typed inventory.

The working directory `.installer/terraform/<deployment>/` holds:
    module/               a copy of terraform/modules/<provider> (the state never depends on
                          where this checkout lives)
    main.tf.json          provider block (region only: no credentials, ever), the module call,
                          and the contract outputs passed through
    terraform.tfvars.json the module's inputs, rendered from the inventory
JSON syntax because it is generated: no HCL quoting to get wrong.
"""

import json
import shutil
from pathlib import Path
from typing import Any

from installer.base.paths import TERRAFORM_MODULES_DIR
from installer.inventory import Inventory
from installer.inventory.cloud import AWSCloud, JDCloud, TencentCloud

MODULES_DIR = TERRAFORM_MODULES_DIR
PROVIDER_SOURCES = {
    "aws": "hashicorp/aws",
    "tencentcloud": "tencentcloudstack/tencentcloud",
    "jdcloud": "hashicorp/jdcloud",
}
SENSITIVE = {"ssh_host_key"}


def module_vars(inv: Inventory, host_key: tuple[str, str] | None) -> dict[str, Any]:
    """The module inputs: the same names for every cloud module, plus each provider's own."""
    cloud = inv.cloud
    if cloud is None:
        raise ValueError(
            f"provider {inv.provider} has no cloud section"
        )  # the loader prevents this

    def disk(d: Any) -> dict[str, Any]:
        return {"size_gb": d.size_gb, **({"type": d.type} if d.type else {})}

    values: dict[str, Any] = {
        "name_prefix": inv.deployment,
        "zone": cloud.zone,
        "instance_type": cloud.instance_type,
        "instance_count": cloud.count,
        "image_id": cloud.image,
        "ssh_user": inv.ssh.user,
        "ssh_public_key": cloud.ssh_public_key.read_text().strip(),
        "system_disk": disk(cloud.system_disk),
        "data_disks": [disk(d) for d in cloud.data_disks],
        "vpc_cidr": cloud.vpc_cidr,
        "subnet_cidr": cloud.subnet_cidr,
        "allowed_cidrs": list(cloud.allowed_cidrs),
        "allow_ssh_from_anywhere": cloud.allow_ssh_from_anywhere,
        "ssh_port": inv.ssh.port,
        "gateway_port": inv.ports.gateway,
        "public_ip": cloud.public_ip,
        "gpu": cloud.gpu.model_dump() if cloud.gpu else None,
    }
    if isinstance(cloud, AWSCloud | TencentCloud):
        values["tags"] = {"deployment": inv.deployment}
        if host_key is not None:
            values["ssh_host_key"] = {"private": host_key[0], "public": host_key[1]}
    if isinstance(cloud, TencentCloud):
        values |= {
            "instance_charge_type": cloud.instance_charge_type,
            "internet_max_bandwidth_out": cloud.internet_max_bandwidth_out,
            "project_id": cloud.project_id,
        }
    if isinstance(cloud, JDCloud):
        values |= {
            "eip_bandwidth_mbps": cloud.eip_bandwidth_mbps,
            "eip_provider": cloud.eip_provider,
        }
    return values


def provider_block(inv: Inventory) -> dict[str, Any]:
    cloud = inv.cloud
    assert cloud is not None
    block: dict[str, Any] = {"region": cloud.region}
    if isinstance(cloud, AWSCloud) and cloud.endpoint:
        # An AWS-compatible API: no STS account lookup, no IMDS probe, every call to the endpoint.
        block |= {
            "skip_credentials_validation": True,
            "skip_requesting_account_id": True,
            "skip_metadata_api_check": True,
            "endpoints": {"ec2": cloud.endpoint, "sts": cloud.endpoint},
        }
    return block


def root_module(inv: Inventory, variables: dict[str, Any]) -> dict[str, Any]:
    name = inv.provider
    return {
        "terraform": {
            "required_version": ">= 1.9",
            "required_providers": {name: {"source": PROVIDER_SOURCES[name]}},
        },
        "provider": {name: provider_block(inv)},
        "variable": {k: ({"sensitive": True} if k in SENSITIVE else {}) for k in sorted(variables)},
        "module": {
            "hosts": {"source": "./module", **{k: f"${{var.{k}}}" for k in sorted(variables)}}
        },
        "output": {
            "contract_version": {"value": "${module.hosts.contract_version}"},
            "hosts": {"value": "${module.hosts.hosts}"},
        },
    }


def write(inv: Inventory, workdir: Path, host_key: tuple[str, str] | None) -> None:
    """(Re)write the working directory; state and .terraform/ in it are left alone."""
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o700)  # state holds addresses and the pinned host key
    module = workdir / "module"
    shutil.rmtree(module, ignore_errors=True)
    shutil.copytree(
        MODULES_DIR / inv.provider, module, ignore=shutil.ignore_patterns(".terraform*")
    )
    variables = module_vars(inv, host_key)
    (workdir / "main.tf.json").write_text(json.dumps(root_module(inv, variables), indent=2) + "\n")
    tfvars = workdir / "terraform.tfvars.json"
    tfvars.write_text(json.dumps(variables, indent=2, sort_keys=True) + "\n")
    tfvars.chmod(0o600)
