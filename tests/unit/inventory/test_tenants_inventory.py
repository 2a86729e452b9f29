"""auth.tenants and audit in the inventory (#38 items 2 and 3): what `validate` refuses, at the
setting's file and line, and what reaches the gateways' config."""

from pathlib import Path

import pytest

from installer.ansible.render import _tenant_vars
from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.preparation.inventory_checks import check_inventory
from installer.secrets import keys
from service.config import TenantsConfig
from tests.support.site_file import JWT_ISSUER, site_file
from tests.support.site_file import refusals as _problems

_JWT = JWT_ISSUER + "    jwks_url: https://idp.example.internal/certs\n"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder of the test's own, without a key store unless the test makes one."""
    folder = tmp_path / "state"
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(folder))
    return folder


def _inventory(tmp_path: Path, tail: str, jwt: bool = True) -> Path:
    return site_file(tmp_path, "auth:\n" + (_JWT if jwt else "") + tail)


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_tenants_reach_the_gateways_config_which_accepts_them(tmp_path: Path) -> None:
    path = _inventory(
        tmp_path,
        (
            "  default_tenant: general\n"
            "  tenants:\n"
            "    - {name: research, models: [tiny], rpm: 60, tpm: 100000, quota_tokens: 1000000, quota_period: month,\n"
            "       claim_values: [llm-research], keys: [ci-bot]}\n"
            "    - {name: general, rpm: 10}\n"
        ),
    )
    inv = load_inventory(path)
    check_inventory(inv)
    rendered = _tenant_vars(type("P", (), {"inventory": inv})())  # type: ignore[arg-type]
    cfg = TenantsConfig.model_validate(rendered["gateway_tenants"])
    assert cfg.claim == "groups" and cfg.default == "general"
    assert [t.name for t in cfg.tenants] == ["research", "general"]
    assert cfg.tenants[0].keys == ["ci-bot"] and cfg.tenants[0].quota_period == "month"
    assert rendered["gateway_request_audit"] == {"retention_days": 365, "max_bytes_per_day": 1 << 30}


@pytest.mark.parametrize(
    ("tail", "line_text", "message"),
    [
        (
            "  tenants:\n    - name: research\n      models: [tiny, huge]\n",
            "models: [tiny, huge]",
            "names model 'huge', which this deployment does not serve",
        ),
        ("  tenants:\n    - name: a\n    - name: a\n", "- name: a", "is also auth.tenants[0]"),
        ("  default_tenant: nobody\n  tenants:\n    - name: a\n", "default_tenant: nobody", "is not a tenant"),
        (
            "  tenants:\n    - name: a\n      keys: [bot]\n    - name: b\n      keys: [bot]\n",
            "keys: [bot]",
            "API key 'bot' is also in auth.tenants[0]",
        ),
        (
            "  tenants:\n    - name: a\n      claim_values: [staff]\n    - name: b\n      claim_values: [staff]\n",
            "claim_values: [staff]",
            "claim value 'staff' also chooses auth.tenants[0]",
        ),
    ],
    ids=["unknown-model", "duplicate-name", "default-unknown", "key-twice", "claim-value-twice"],
)
def test_validate_refuses_tenant_mistakes_at_their_line(
    tmp_path: Path, tail: str, line_text: str, message: str
) -> None:
    path = _inventory(tmp_path, tail)
    problems = _problems(path)
    assert len(problems) == 1, problems
    assert message in problems[0]
    # the last line holding the text: a duplicate's second occurrence is the one named
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line_text in line]
    assert f"site.yml:{lines[-1]}:" in problems[0]


def test_a_default_tenant_without_jwt_is_refused(tmp_path: Path) -> None:
    path = _inventory(tmp_path, "  default_tenant: a\n  tenants:\n    - name: a\n", jwt=False)
    problems = _problems(path)
    assert any(f"site.yml:{_line_of(path, '  default_tenant:')}:" in p and "auth.jwt is not set" in p for p in problems)


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("  tenants:\n    - name: a\n      quota_tokens: 5\n", "quota_tokens and quota_period go together"),
        ("  tenants:\n    - name: Bad Name\n", "a tenant name"),
        ("  tenants:\n    - name: a\n      rpm: 0\n", "greater than or equal to 1"),
    ],
    ids=["quota-half", "bad-name", "zero-rpm"],
)
def test_load_refuses_malformed_tenants(tmp_path: Path, tail: str, message: str) -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory(_inventory(tmp_path, tail))
    text = str(err.value) + "\n".join(err.value.details)
    assert message in text and "site.yml:" in text


def test_retention_below_zero_is_refused_at_its_line(tmp_path: Path) -> None:
    path = _inventory(tmp_path, "")
    path.write_text(path.read_text() + "audit:\n  retention_days: -1\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    text = str(err.value) + "\n".join(err.value.details)
    assert f"site.yml:{_line_of(path, '  retention_days:')}:" in text and "greater than or equal to 0" in text


def test_an_inventory_without_tenants_or_audit_dumps_as_before(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "", jwt=True))
    dumped = inv.model_dump(mode="json", exclude_unset=False)
    assert set(dumped["auth"]) == {"jwt"} and "audit" not in dumped


def test_a_tenant_key_not_in_the_key_store_is_refused_at_its_line(tmp_path: Path, state: Path) -> None:
    """With a key store, each name in a tenant's keys must be one of its keys (a revoked one too:
    it authenticates nobody, and revoking must not block the next `up`)."""
    path = _inventory(tmp_path, "  tenants:\n    - name: a\n      keys: [ci-bot, old-bot, ci-bto]\n")
    check_inventory(load_inventory(path))  # no key store here: nothing to check against
    assert not state.exists()  # and validate made no state folder looking for one
    keys.create("ci-bot")
    keys.create("old-bot")
    keys.revoke("old-bot")
    problems = _problems(path)
    assert len(problems) == 1, problems
    assert f"site.yml:{_line_of(path, 'keys: [ci-bot')}:" in problems[0]
    assert f"API key 'ci-bto' is not in the key store {state / 'keys.json'}" in problems[0]
    assert "installer keys create --name ci-bto" in problems[0]
    keys.create("ci-bto")
    check_inventory(load_inventory(path))
