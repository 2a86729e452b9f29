"""Credentials are found (or missed) before any API call, and never written by us."""

from pathlib import Path

import pytest

from installer.terraform import credentials, provision
from installer.terraform.errors import CredentialsError
from tests.support.terraform_helpers import cloud_inventory


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        ("aws", "no AWS credentials found"),
        ("tencentcloud", "no Tencent Cloud credentials found"),
        ("jdcloud", "no JD Cloud credentials found"),
    ],
)
def test_missing_credentials(provider: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=message) as err:
        credentials.check(provider, {}, home=tmp_path)
    assert any("never stores credentials" in line for line in err.value.details)


def test_half_a_key_pair_is_named() -> None:
    with pytest.raises(
        CredentialsError, match="AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
    ):
        credentials.check("aws", {"AWS_ACCESS_KEY_ID": "x"})
    with pytest.raises(CredentialsError, match="TENCENTCLOUD_SECRET_ID is not"):
        credentials.check("tencentcloud", {"TENCENTCLOUD_SECRET_KEY": "x"})


def test_environment_and_credential_files_are_accepted(tmp_path: Path) -> None:
    assert credentials.check("aws", {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}) == {}
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    assert credentials.check("aws", {}, home=tmp_path) == {}
    (tmp_path / ".tccli").mkdir()
    (tmp_path / ".tccli" / "prod.credential").write_text("{}")
    assert credentials.check("tencentcloud", {"TENCENTCLOUD_PROFILE": "prod"}, home=tmp_path) == {}
    with pytest.raises(CredentialsError):
        credentials.check("tencentcloud", {}, home=tmp_path)  # profile "default" has no file


def test_jdcloud_names_are_handed_to_the_provider_in_its_own_spelling() -> None:
    extra = credentials.check("jdcloud", {"JDCLOUD_ACCESS_KEY": "ak", "JDCLOUD_SECRET_KEY": "sk"})
    assert extra == {"access_key": "ak", "secret_key": "sk"}
    assert credentials.check("jdcloud", {"access_key": "ak", "secret_key": "sk"}) == {}


def test_provision_stops_before_terraform_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = cloud_inventory("tencentcloud", tmp_path)
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(credentials.Path, "home", lambda: tmp_path)
    for name in (
        "TENCENTCLOUD_SECRET_ID",
        "TENCENTCLOUD_SECRET_KEY",
        "TENCENTCLOUD_SHARED_CREDENTIALS_DIR",
    ):
        monkeypatch.delenv(name, raising=False)

    def no_terraform(*_a: object, **_k: object) -> None:
        raise AssertionError("terraform must not run without credentials")

    monkeypatch.setattr(provision, "Terraform", no_terraform)
    with pytest.raises(CredentialsError, match="no Tencent Cloud credentials"):
        provision.provision(inv)
    assert not (tmp_path / "state" / "terraform").exists()  # nothing written either
