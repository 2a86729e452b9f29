"""A cloud inventory's terraform comes from the bundle and runs with the cloud credentials: the
bundle's signature and bytes are checked before anything in it runs.

The bundles' `terraform/bin/terraform` is a script that writes a marker file. `installer up`,
`up --check` and `plan --bundle` (the real CLI) must refuse an unsigned bundle and one signed
by a stranger's key without running it, and without running any terraform at all.
"""

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from installer.base.errors import BundleError
from installer.bundle import build, sign, terraform_tools
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, Manifest, scan
from installer.cli import _register, app
from installer.preparation import prepare
from installer.terraform import provision
from tests.support.terraform_helpers import cloud_inventory, marker_terraform, operator_env

runner = CliRunner()
_register()


def _bundle(root: Path, marker: Path, key: Path | None) -> Path:
    """A bundle directory with terraform in it, its manifest signed with `key` when given."""
    files = {
        "terraform/bin/terraform": marker_terraform(marker),
        "terraform/plugins/registry.terraform.io/hashicorp/aws/5.100.0/linux_amd64/README": b"p",
        "model/config.json": b"{}",
        "playbooks/site.yml": b"---\n- hosts: all\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "terraform/bin/terraform").chmod(0o755)
    man = Manifest({"os": "debian-12"}, {"terraform": "1.9.8"}, [], scan(root))
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    if key is not None:
        signature = sign.signature_for((root / MANIFEST).read_bytes(), sign.load_private_key(key))
        (root / SIGNATURE).write_bytes(signature)
    return root


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    operator_env(monkeypatch, tmp_path / "path-bin", marker_terraform(tmp_path / "path-terraform-ran"))
    trusted = sign.keygen()  # the operator's key, under the state's keys/
    stranger = sign.keygen(tmp_path / "stranger")
    cloud_inventory("aws", tmp_path)
    return {
        "site": tmp_path / "aws.yml",
        "marker": tmp_path / "bundle-terraform-ran",
        "path_marker": tmp_path / "path-terraform-ran",
        "trusted": trusted,
        "stranger": stranger,
        "tmp": tmp_path,
    }


def _unsigned_dir(c: dict[str, Any]) -> tuple[Path, str]:
    return _bundle(c["tmp"] / "unsigned", c["marker"], None), "the bundle is not signed"


def _stranger_tar(c: dict[str, Any]) -> tuple[Path, str]:
    root = _bundle(c["tmp"] / "stranger-bundle", c["marker"], c["stranger"].private_key)
    build.write_tar(root, c["tmp"] / "stranger.tar")
    return c["tmp"] / "stranger.tar", f"signed by key {c['stranger'].key_id}, which is not one of the trusted keys"


COMMANDS = {
    "up": ["up"],
    "up --check": ["up", "--check"],
    "plan": ["plan"],
}


@pytest.mark.parametrize("make", [_unsigned_dir, _stranger_tar], ids=["unsigned", "stranger"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_untrusted_bundle_runs_nothing(cloud: dict[str, Any], make: Any, command: str) -> None:
    bundle, reason = make(cloud)
    result = runner.invoke(app, [*COMMANDS[command], "-i", str(cloud["site"]), "--bundle", str(bundle)])
    assert result.exit_code != 0
    assert isinstance(result.exception, BundleError), result.output
    assert reason in str(result.exception)
    assert not cloud["marker"].exists(), cloud["marker"].read_text()
    assert not cloud["path_marker"].exists(), "a terraform ran before the bundle was refused"
    assert not (cloud["tmp"] / "state" / "terraform").exists()  # no workspace, no state


def test_a_trusted_bundle_provisions_with_its_own_verified_terraform(cloud: dict[str, Any]) -> None:
    bundle = _bundle(cloud["tmp"] / "trusted", cloud["marker"], cloud["trusted"].private_key)
    opened = prepare.open_verified(bundle)
    ws = provision.prepare(cloud_inventory("aws", cloud["tmp"]), tools=terraform_tools.from_bundle(opened))
    assert Path(ws.tf.binary) == opened.root / "terraform" / "bin" / "terraform"
    assert cloud["marker"].read_text().splitlines()[:2] == [
        f"-chdir={ws.dir} version -json",
        f"-chdir={ws.dir} init -input=false -no-color",
    ]
    assert not cloud["path_marker"].exists()
