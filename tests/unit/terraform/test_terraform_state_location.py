"""A cloud deployment whose Terraform state is in ./.installer (where state lived before it moved
next to the inventory) is not provisioned a second time from an empty state next to the inventory."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.base import paths
from installer.terraform import provision
from installer.terraform.errors import TerraformError
from tests.support.terraform_helpers import cloud_inventory, operator_env


@pytest.fixture
def moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("INSTALLER_STATE_DIR", raising=False)
    # This terraform prints no version: a test that gets past the guard stops at the first call.
    operator_env(monkeypatch, tmp_path / "bin", f"#!/bin/sh\necho ran >> {tmp_path / 'terraform-ran'}\n".encode())
    (tmp_path / "site").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    paths.use_state_dir(None)
    paths.anchor_state_to(tmp_path / "site" / "aws.yml")
    yield tmp_path
    paths.use_state_dir(None)


def _state(folder: Path, resources: int) -> None:
    folder.mkdir(parents=True)
    state = {"version": 4, "resources": [{"type": "aws_instance", "name": f"r{i}"} for i in range(resources)]}
    (folder / "terraform.tfstate").write_text(json.dumps(state))


def test_an_empty_state_next_to_the_inventory_is_refused_when_the_old_place_has_the_fleet(
    moved: Path,
) -> None:
    inv = cloud_inventory("aws", moved / "site")
    old = moved / "cwd" / ".installer"
    _state(old / "terraform" / inv.deployment, 9)
    with pytest.raises(TerraformError) as err:
        provision.prepare(inv)
    assert str(err.value) == (
        f"deployment gpu-demo has no Terraform state in {moved / 'site' / '.installer' / 'terraform' / 'gpu-demo'}, "
        f"but {old / 'terraform' / 'gpu-demo'} has one; nothing was changed"
    )
    assert f"use that state: `installer --state-dir {old} ...`" in err.value.details[0]
    assert not (moved / "terraform-ran").exists()


def test_a_destroyed_fleet_elsewhere_does_not_block(moved: Path) -> None:
    inv = cloud_inventory("aws", moved / "site")
    _state(moved / "cwd" / ".installer" / "terraform" / inv.deployment, 0)  # after `installer down`
    with pytest.raises(TerraformError, match="printed no version"):  # the PATH stub is no terraform
        provision.prepare(inv)
    assert (moved / "terraform-ran").exists()
