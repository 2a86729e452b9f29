"""Terraform without the network: the bundle's terraform + provider mirror, and the baremetal
module applied for real (it needs no provider at all)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from installer.bundle.manifest import MANIFEST, Manifest, scan
from installer.terraform import contract, mirror
from installer.terraform.cli import Terraform
from installer.terraform.errors import TerraformError
from installer.terraform.tfvars import MODULES_DIR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MIRROR = Path("/opt/tf-plugins")
if shutil.which("terraform") is None:
    pytest.skip("needs terraform", allow_module_level=True)


def _env(tmp_path: Path) -> dict[str, str]:
    # No CLI config of the machine's own: only what the installer writes is in effect.
    return {**os.environ, "TF_CLI_CONFIG_FILE": str(tmp_path / "none.tfrc")}


@pytest.mark.skipif(
    not (MIRROR / "registry.terraform.io/hashicorp/aws").is_dir(), reason="no aws mirror"
)
def test_bundle_carries_terraform_and_a_mirror_that_inits_offline(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    versions = mirror.add_to_bundle(
        bundle, MODULES_DIR / "aws", mirror.TerraformTools("terraform", MIRROR), _env(tmp_path)
    )
    assert versions["hashicorp/aws"] == "5.100.0" and versions["terraform"].startswith("1.")
    man = Manifest(target={}, components=versions, packages=[], files=scan(bundle))
    (bundle / MANIFEST).write_text(man.to_json())

    tools = mirror.tools_from_bundle(bundle)
    assert tools is not None and tools.plugin_mirror == bundle / "terraform" / "plugins"
    work = tmp_path / "work"
    shutil.copytree(MODULES_DIR / "aws", work)
    tf = Terraform(tools.binary, work, {**_env(tmp_path), **mirror.cli_env(work, tools)})
    tf.init()  # only the bundle's mirror is configured: success means nothing was downloaded
    lock = (work / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/hashicorp/aws"' in lock and '"5.100.0"' in lock

    # A tampered binary is refused before it ever runs.
    (bundle / "terraform" / "bin" / "terraform").write_bytes(b"#!/bin/sh\necho pwned\n")
    with pytest.raises(TerraformError, match="does not match its manifest checksum"):
        mirror.tools_from_bundle(bundle)


def test_baremetal_module_passes_hosts_through_the_contract(tmp_path: Path) -> None:
    work = tmp_path / "bm"
    shutil.copytree(MODULES_DIR / "baremetal", work)
    (work / "terraform.tfvars.json").write_text(
        json.dumps(
            {
                "ssh_user": "admin",
                "hosts": [
                    {
                        "name": "gpu-1",
                        "address": "192.0.2.10",
                        "gpu_type": "NVIDIA H200",
                        "gpu_count": 8,
                    },
                    {
                        "name": "gpu-2",
                        "address": "192.0.2.11",
                        "private_address": "10.0.0.11",
                        "ssh_user": "root",
                    },
                ],
            }
        )
    )
    tf = Terraform("terraform", work, _env(tmp_path))
    tf.init()
    summary = tf.plan(work / "p.tfplan")
    assert not summary.has_changes  # nothing to create: only outputs
    tf.apply(work / "p.tfplan")
    hosts = contract.parse(tf.outputs())
    assert hosts == [
        contract.ProvisionedHost("gpu-1", "192.0.2.10", "192.0.2.10", "admin", "NVIDIA H200", 8),
        contract.ProvisionedHost("gpu-2", "192.0.2.11", "10.0.0.11", "root", None, None),
    ]
    assert [h.address for h in contract.to_inventory_hosts(hosts, public=False)] == [
        "192.0.2.10",
        "10.0.0.11",
    ]
