"""A JWKS URL's CA bundle (auth.jwt.jwks_ca) is a file the gateway role copies by its path: a new
bundle under the same path must still make a converged `up` configure again (#38)."""

from pathlib import Path

import yaml

from installer.bundle.manifest import Manifest
from installer.converged import fast_path as converged


def _inputs(tmp_path: Path) -> dict[str, dict[str, str]]:
    man = Manifest(target={}, components={}, packages=[])
    return converged.inputs(tmp_path / "inv", man, tmp_path / "playbooks")


def test_a_new_ca_bundle_under_the_same_path_is_a_change(tmp_path: Path) -> None:
    ca = tmp_path / "idp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nold\n")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "inv" / "group_vars").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": {}}}}))
    (tmp_path / "inv" / "group_vars" / "all.yml").write_text(yaml.safe_dump({"gateway_jwks_ca_src": str(ca)}))
    before = _inputs(tmp_path)["h1"]["files the roles copy"]
    ca.write_text("-----BEGIN CERTIFICATE-----\nrenewed\n")
    assert _inputs(tmp_path)["h1"]["files the roles copy"] != before
