"""auth.jwt in the inventory (#38 item 1): what `validate` refuses, with the file and line, and
the hosts' jwks.json holding the file's usable public keys only."""

import json
from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import jwks_file, load_inventory
from installer.preparation.inventory_checks import check_inventory
from tests.support import idp
from tests.support.site_file import JWT_ISSUER, refusals, site_file


def _inventory(tmp_path: Path, jwt_yaml: str) -> Path:
    return site_file(tmp_path, "auth:\n" + JWT_ISSUER + jwt_yaml)


def _with_file(tmp_path: Path, document: object) -> Path:
    (tmp_path / "jwks.json").write_text(json.dumps(document))
    return _inventory(tmp_path, "    jwks_file: jwks.json\n")


def _problems(path: Path) -> str:
    return "\n".join(refusals(path))


def test_a_jwks_file_of_public_keys_passes_and_the_hosts_get_the_usable_ones(tmp_path: Path) -> None:
    keys = [idp.make_key("RS256", "r1"), idp.make_key("ES256", "e1"), idp.make_key("EdDSA", "o1")]
    document = idp.jwks(*keys)
    document["keys"].append({**keys[0].public(), "kid": "enc", "use": "enc"})  # left out, not fatal
    inv = load_inventory(_with_file(tmp_path, document))
    check_inventory(inv)
    hosts = json.loads(jwks_file.public_document(inv))
    assert [k["kid"] for k in hosts["keys"]] == ["e1", "o1", "r1"]
    assert inv.auth.jwt is not None and inv.auth.jwt.jwks_file == tmp_path / "jwks.json"  # resolved


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"keys": [{"kty": "oct", "kid": "s", "k": "c2VjcmV0c2VjcmV0"}]}, "private-key material"),
        ({"keys": [{"kty": "oct", "kid": "s"}]}, "kty 'oct' signs none of the allowed algorithms"),
        ({"keys": []}, "it lists no keys"),
        ({"not": "a jwks"}, "is not a usable JWKS"),
    ],
    ids=["symmetric-secret", "wrong-kty", "empty", "not-jwks"],
)
def test_a_jwks_file_with_no_usable_key_is_refused_with_its_line(
    tmp_path: Path, document: object, message: str
) -> None:
    path = _with_file(tmp_path, document)
    text = _problems(path)
    assert f"{path}:10: auth.jwt.jwks_file" in text, text
    assert message in text, text


def test_keys_for_other_uses_or_algorithms_are_not_usable(tmp_path: Path) -> None:
    rsa = idp.make_key("RS256", "r1").public()
    ec = idp.make_key("ES256", "e1").public()
    keys = [{**rsa, "use": "enc"}, {**ec, "alg": "HS256"}, {**ec, "kid": "p384", "crv": "P-384"}]
    text = _problems(_with_file(tmp_path, {"keys": keys}))
    assert "use 'enc' is not sig" in text and "alg 'HS256' is not one of the allowed" in text and "crv 'P-384'" in text


def test_private_key_material_is_refused(tmp_path: Path) -> None:
    signer = idp.make_key("ES256", "e1")
    private = {**signer.key.as_dict(private=True), "kid": "e1"}
    text = _problems(_with_file(tmp_path, {"keys": [private]}))
    assert "private-key material (key 0 (kid 'e1'))" in text and "treat that private key as leaked" in text


def test_a_missing_jwks_file_is_named(tmp_path: Path) -> None:
    assert "does not exist; fix the path" in _problems(_inventory(tmp_path, "    jwks_file: nowhere.json\n"))


@pytest.mark.parametrize(
    ("yaml", "line", "message"),
    [
        ("    jwks_file: j.json\n    algorithms: [RS256, none]\n", 11, "'none' is refused (an unsigned token"),
        ("    jwks_file: j.json\n    algorithms: [HS256]\n", 11, "'HS256' is refused (a shared-secret algorithm"),
        ("    jwks_file: j.json\n    algorithms: [PS512]\n", 11, "not an algorithm the gateways verify"),
        ("    jwks_file: j.json\n    clock_skew_s: 3600\n", 11, "less than or equal to 300"),
        ("    jwks_url: http://idp.example.internal/jwks\n", 10, "is not an https:// URL"),
        ("    jwks_file: j.json\n    jwks_url: https://idp.example.internal/jwks\n", 7, "exactly one of jwks_file"),
    ],
    ids=["none", "hs256", "other-alg", "skew", "http-url", "two-sources"],
)
def test_bad_settings_are_refused_at_load(tmp_path: Path, yaml: str, line: int, message: str) -> None:
    path = _inventory(tmp_path, yaml)
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    text = "\n".join(err.value.details)
    assert f"{path}:{line}" in text, text
    assert message in text, text


def test_an_inventory_without_auth_dumps_as_before(tmp_path: Path) -> None:
    path = _inventory(tmp_path, "    jwks_file: j.json\n")
    path.write_text(path.read_text().split("auth:")[0])
    assert "auth" not in load_inventory(path).model_dump()
