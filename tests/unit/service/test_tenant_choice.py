"""Which tenant a caller gets (#38 item 2): by a token's claim (a string or a list of groups, the
configured order deciding between several), by an API key's tenant, else the default or a 403;
and the tenant's policy replaces the caller's own, charged under the tenant's name."""

import asyncio
from typing import Any

import pytest

from service.auth import ApiKey
from service.config import TenantsConfig
from service.errors import GatewayError
from service.limits import LocalLimiter
from service.tenants import Tenants
from service.usage import usage_caller

_CFG: dict[str, Any] = {
    "claim": "groups",
    "tenants": [
        {"name": "research", "models": ["big"], "rpm": 2, "claim_values": ["llm-research", "ml"], "keys": ["ci"]},
        {"name": "support", "tpm": 1000, "quota_tokens": 5000, "quota_period": "day"},
    ],
}


def _tenants(**over: Any) -> Tenants:
    return Tenants.of(TenantsConfig.model_validate({**_CFG, **over}))


CALLER = ApiKey(name="jwt/alice.0123456789ab", digest=b"", expires=9e9)


@pytest.mark.parametrize(
    ("claims", "tenant"),
    [
        ({"groups": ["staff", "ml"]}, "research"),
        ({"groups": "support"}, "support"),  # a tenant with no claim_values is chosen by its name
        ({"groups": ["support", "llm-research"]}, "research"),  # the configured order decides
        ({"groups": [3, {"x": 1}, "support"]}, "support"),  # values that are not strings are skipped
    ],
)
def test_a_claim_chooses_the_first_matching_tenant(claims: dict[str, Any], tenant: str) -> None:
    assert _tenants().for_token(CALLER, claims).tenant == tenant


@pytest.mark.parametrize("claims", [{}, {"groups": []}, {"groups": ["staff"]}, {"groups": 7}, {"tenant": "support"}])
def test_no_matching_tenant_is_a_403_without_a_default(claims: dict[str, Any]) -> None:
    with pytest.raises(GatewayError) as err:
        _tenants().for_token(CALLER, claims)
    assert err.value.status == 403 and err.value.code == "no_tenant"


def test_no_matching_tenant_gets_the_default_when_configured() -> None:
    assert _tenants(default="support").for_token(CALLER, {"groups": ["staff"]}).tenant == "support"


def test_another_claim_name_is_read_when_configured() -> None:
    tenants = _tenants(claim="tenant")
    assert tenants.for_token(CALLER, {"tenant": "support", "groups": ["ml"]}).tenant == "support"


def test_the_tenants_policy_replaces_the_callers_and_is_charged_to_the_tenant() -> None:
    key = ApiKey(name="ci", digest=b"x", rpm=100, models=frozenset({"small"}), release_tester=True)
    tenants = _tenants()
    ci = tenants.for_key(key)
    assert (ci.tenant, ci.rpm, ci.models, ci.release_tester) == ("research", 2, frozenset({"big"}), True)
    assert ci.allows("big") and not ci.allows("small")
    assert ci.limit_name == "tenant/research" and usage_caller(ci) == "ci~research"
    other = ApiKey(name="other", digest=b"y", rpm=1)
    assert tenants.for_key(other) is other and other.limit_name == "other" and usage_caller(other) == "other"


def test_two_callers_of_a_tenant_share_its_bucket_and_another_tenant_has_its_own() -> None:
    tenants = _tenants()
    alice = tenants.for_token(CALLER, {"groups": ["ml"]})
    bob = tenants.for_token(ApiKey(name="jwt/bob.ba9876543210", digest=b""), {"groups": ["ml"]})
    carol = tenants.for_key(ApiKey(name="ci", digest=b""))
    limiter = LocalLimiter()

    async def reserve(caller: ApiKey) -> float:
        return await limiter.reserve(caller, 0)

    # research has rpm 2: alice and bob together get two, the third (any of its callers) waits
    assert [asyncio.run(reserve(c)) for c in (alice, bob)] == [0.0, 0.0]
    assert asyncio.run(reserve(carol)) > 0
    support = tenants.for_token(CALLER, {"groups": ["support"]})
    assert asyncio.run(reserve(support)) == 0.0  # support's bucket is its own (no rpm)
