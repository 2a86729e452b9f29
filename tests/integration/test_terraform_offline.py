"""Terraform without the network: the bundle's terraform + provider mirror, and the baremetal
module applied for real (it needs no provider at all)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle import build, sign, terraform_tools
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, Manifest, scan
from installer.terraform import contract, mirror
from installer.terraform.cli import Terraform
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
    (bundle / CHECKSUMS).write_text(man.checksums_text())
    keys = sign.keygen(tmp_path / "keys")
    signature = sign.signature_for((bundle / MANIFEST).read_bytes(), sign.load_private_key(keys.private_key))
    (bundle / SIGNATURE).write_bytes(signature)
    trust = sign.Trust((keys.public_key,))

    tools = terraform_tools.from_bundle(build.open_bundle(bundle, trust))
    assert tools is not None and tools.plugin_mirror == bundle / "terraform" / "plugins"
    work = tmp_path / "work"
    shutil.copytree(MODULES_DIR / "aws", work)
    tf = Terraform(tools.binary, work, {**_env(tmp_path), **mirror.cli_env(work, tools)})
    tf.init()  # only the bundle's mirror is configured: success means nothing was downloaded
    lock = (work / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/hashicorp/aws"' in lock and '"5.100.0"' in lock

    # A tampered binary is refused before it ever runs: only a verified bundle gives tools.
    (bundle / "terraform" / "bin" / "terraform").write_bytes(b"#!/bin/sh\necho pwned\n")
    with pytest.raises(BundleError, match="failed verification") as err:
        build.open_bundle(bundle, trust)
    assert any("terraform/bin/terraform" in line for line in err.value.details)


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


@pytest.mark.skipif(
    not (MIRROR / "registry.terraform.io/hashicorp/aws").is_dir(), reason="no aws mirror"
)
def test_cloud_bundles_carry_terraform_for_the_control_machine_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle builder's hook: an AWS inventory gets terraform + its providers; hosts never
    receive them, and they do not change the release the hosts install."""
    from installer.bundle import push
    from installer.inventory import load_inventory

    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_TF_PLUGIN_MIRROR", str(MIRROR))
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(tmp_path / "none.tfrc"))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTestOnly0000000000000000000"
    (tmp_path / "key.pub").write_text(f"ssh-ed25519 {key} t\n")
    (tmp_path / "site.yml").write_text(
        "deployment: tfb\nprovider: aws\nmodel: {path: weights, served_name: tiny}\n"
        "cloud: {region: us-east-1, zone: us-east-1a, instance_type: g5.xlarge, "
        "image: ami-12c6146b, allowed_cidrs: [203.0.113.0/24], ssh_public_key: key.pub}\n"
    )
    inv = load_inventory(tmp_path / "site.yml")
    assert mirror.bundle_input(inv) is not None
    assert mirror.bundle_input(inv.model_copy(update={"provider": "baremetal"})) is None

    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "wheels" / "a.whl").write_bytes(b"wheel")
    before = Manifest(target={}, components={}, packages=[], files=scan(bundle))
    versions = mirror.add_for_inventory(bundle, inv)
    assert versions is not None and versions["hashicorp/aws"] == "5.100.0"
    man = Manifest(target={}, components=versions, packages=[], files=scan(bundle))
    assert any(f.path == "terraform/bin/terraform" for f in man.files)
    assert [f.path for f in man.host_files] == ["wheels/a.whl"]
    assert man.host_size == 5 < man.total_size
    assert man.release_id == before.release_id  # terraform is not part of what hosts install
    assert [w.path for w in push._wanted(bundle, man, man.host_files)] == ["wheels/a.whl"]
