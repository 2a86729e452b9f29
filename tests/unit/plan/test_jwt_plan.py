"""auth.jwt reaches the gateways (#38 item 1): the rendered variables give each gateway's config a
jwt section the gateway accepts, with the JWKS file's public keys pushed as jwks.json, or the URL
and its CA bundle; without auth.jwt, no jwt section and no file."""

import json
from pathlib import Path
from typing import Any

import pytest

from installer.inventory import Inventory
from installer.planning import plan as deployment_plan
from service.config import Settings
from tests.support import idp
from tests.support.engine_role import rendered_vars
from tests.support.gateway_role import gateway_config, one_host


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _inventory(tmp_path: Path, jwt: dict[str, Any] | None) -> Inventory:
    return one_host(tmp_path, **({"auth": {"jwt": jwt}} if jwt else {}))


def _gateway_config(variables: dict[str, Any]) -> dict[str, Any]:
    return gateway_config({**variables, "gateway_workers": 1, "gateway_redis_url": ""})


def _settings(config: dict[str, Any], tmp_path: Path) -> Settings:
    keys = tmp_path / "keys.json"
    keys.write_text('{"version": 1, "keys": []}')
    return Settings.model_validate({**config, "keys_file": str(keys)})


def test_a_jwks_file_is_pushed_as_public_keys_and_named_in_the_gateway_config(tmp_path: Path) -> None:
    signer = idp.make_key("ES256", "e1")
    (tmp_path / "jwks.json").write_text(json.dumps(idp.jwks(signer)))
    inv = _inventory(tmp_path, {"issuers": [idp.ISSUER], "audiences": [idp.AUDIENCE],
                                "algorithms": ["ES256"], "jwks_file": str(tmp_path / "jwks.json")})
    variables = rendered_vars(deployment_plan.build(inv), "h1")
    assert json.loads(variables["gateway_jwks_json"]) == {"keys": [signer.public()]}
    config = _gateway_config(variables)
    assert config["jwt"]["jwks_file"] == variables["pli_config_dir"] + "/jwks.json"
    settings = _settings(config, tmp_path)
    assert settings.jwt is not None
    assert (settings.jwt.issuers, settings.jwt.algorithms, settings.jwt.clock_skew_s) == ([idp.ISSUER], ["ES256"], 60)


def test_a_jwks_url_is_named_with_its_ca_bundle(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    inv = _inventory(tmp_path, {"issuers": [idp.ISSUER], "audiences": [idp.AUDIENCE], "clock_skew_s": 30,
                                "jwks_url": "https://idp.example.internal/jwks", "jwks_ca": str(tmp_path / "ca.pem")})
    variables = rendered_vars(deployment_plan.build(inv), "h1")
    assert variables["gateway_jwks_json"] == ""
    assert variables["gateway_jwks_ca_src"] == str(tmp_path / "ca.pem")
    settings = _settings(_gateway_config(variables), tmp_path)
    assert settings.jwt is not None
    assert settings.jwt.jwks_url == "https://idp.example.internal/jwks"
    assert str(settings.jwt.jwks_ca_file) == variables["pli_config_dir"] + "/jwks-ca.pem"
    assert (settings.jwt.jwks_file, settings.jwt.clock_skew_s, settings.jwt.jwks_refresh_s) == (None, 30, 300)


def test_without_auth_no_jwt_section_and_no_file(tmp_path: Path) -> None:
    variables = rendered_vars(deployment_plan.build(_inventory(tmp_path, None)), "h1")
    assert (variables["gateway_jwt"], variables["gateway_jwks_json"], variables["gateway_jwks_ca_src"]) == ({}, "", "")
    assert "jwt" not in _gateway_config(variables)
