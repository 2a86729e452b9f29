"""A bundle's terraform is remembered for `installer down` and `plan` without --bundle, but the
bundle's folder stays writable by its owner after the signature check: every later run first
compares that folder with the signed manifest's digests, and runs nothing when it differs.

The real CLI (`plan --bundle`, then `down`) with a trusted directory bundle whose terraform is a
script that logs its arguments; a terraform on PATH logs to its own file, so a fallback to it
would show too.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.bundle import sign
from installer.cli import _register, app
from installer.terraform import mirror
from installer.terraform.errors import TerraformError
from tests.support.bundles import make_bundle
from tests.support.terraform_helpers import cloud_inventory, marker_terraform, operator_env

runner = CliRunner()
_register()

PLUGIN = "terraform/plugins/registry.terraform.io/hashicorp/aws/5.100.0/linux_amd64"


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`installer plan --bundle` has run with a trusted directory bundle."""
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    operator_env(monkeypatch, tmp_path / "path-bin", marker_terraform(tmp_path / "path-terraform-ran"))
    cloud_inventory("aws", tmp_path)
    bundle, marker = tmp_path / "bundle", tmp_path / "bundle-terraform-ran"
    make_bundle(bundle, sign.keygen().private_key, {
        "terraform/bin/terraform": marker_terraform(marker),
        f"{PLUGIN}/terraform-provider-aws_v5.100.0_x5": b"provider bytes",
        "model/config.json": b"{}",
        "playbooks/site.yml": b"---\n- hosts: all\n",
    })
    (bundle / "terraform/bin/terraform").chmod(0o755)
    site = tmp_path / "aws.yml"
    result = runner.invoke(app, ["plan", "-i", str(site), "--bundle", str(bundle)])
    assert result.exit_code == 0, result.output
    assert "version -json" in marker.read_text()  # the bundle's own terraform ran
    marker.unlink()
    return {"site": site, "bundle": bundle, "marker": marker, "tmp": tmp_path}


def _down(p: dict[str, Any]) -> Any:
    return runner.invoke(app, ["down", "-i", str(p["site"]), "--yes"])


def test_down_runs_the_remembered_terraform_while_it_is_what_the_bundle_signed(planned: dict[str, Any]) -> None:
    result = _down(planned)
    assert result.exit_code == 0, result.output
    assert "nothing to destroy" in result.output
    assert planned["marker"].read_text().splitlines()[0].endswith("version -json")
    assert not (planned["tmp"] / "path-terraform-ran").exists()


def test_down_refuses_a_terraform_replaced_after_the_check(planned: dict[str, Any]) -> None:
    tampered = planned["tmp"] / "tampered-terraform-ran"
    binary = planned["bundle"] / "terraform/bin/terraform"
    binary.write_bytes(marker_terraform(tampered))
    result = _down(planned)
    assert isinstance(result.exception, TerraformError), result.output
    assert "is no longer what its bundle signed; nothing was run" in str(result.exception)
    assert "bin/terraform: changed" in result.exception.details
    assert not tampered.exists() and not planned["marker"].exists()
    assert not (planned["tmp"] / "path-terraform-ran").exists()  # no fallback to PATH either


def test_plan_without_bundle_refuses_a_provider_added_or_linked_after_the_check(planned: dict[str, Any]) -> None:
    plugins = planned["bundle"] / PLUGIN
    (plugins / "terraform-provider-null_v3").write_bytes(b"#!/bin/sh\n")
    (plugins / "terraform-provider-aws_v5.100.0_x5").unlink()
    (plugins / "terraform-provider-aws_v5.100.0_x5").symlink_to(planned["tmp"] / "elsewhere")
    result = runner.invoke(app, ["plan", "-i", str(planned["site"])])
    assert isinstance(result.exception, TerraformError), result.output
    rel = PLUGIN.removeprefix("terraform/")
    assert f"{rel}/terraform-provider-null_v3: not in the bundle" in result.exception.details
    assert f"{rel}/terraform-provider-aws_v5.100.0_x5: a link" in result.exception.details
    assert not planned["marker"].exists()


def test_a_path_remembered_without_digests_is_refused(planned: dict[str, Any]) -> None:
    """tools.json as an older installer wrote it: a bundle path and nothing to check it with."""
    tools = planned["tmp"] / "state" / "terraform" / "gpu-demo" / "tools.json"  # the fixture's deployment
    data = json.loads(tools.read_text())
    tools.write_text(json.dumps({"binary": data["binary"], "plugin_mirror": data["plugin_mirror"]}))
    result = _down(planned)
    assert isinstance(result.exception, TerraformError), result.output
    assert "written by an older installer" in str(result.exception)
    assert not planned["marker"].exists()


def test_the_operators_own_terraform_is_remembered_without_a_check(tmp_path: Path) -> None:
    own = mirror.TerraformTools("/usr/local/bin/terraform", None)
    mirror.remember(tmp_path, own)
    assert mirror.locate(tmp_path, {}) == own
    mirror.check_signed(own)  # nothing to compare: the operator's choice, as PATH is
