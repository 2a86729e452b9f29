"""Tenants: named policies (allowed models, rpm/tpm, a token quota) that several callers share.

A token's caller is put in a tenant by a claim (`groups`, `tenant`, or the configured one); an
API key by the tenant's `keys`. The caller then carries the tenant's policy in place of its own
(ApiKey.tenant), and its requests are charged to the tenant's buckets and quota
(ApiKey.limit_name): the existing limiters and ledger do the rest, in Redis across every
gateway. Usage stays recorded per caller, with its tenant (service/usage.py's usage_caller).
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from service.auth import ApiKey
from service.config import TenantConfig, TenantsConfig
from service.errors import GatewayError


def no_tenant(claim: str) -> GatewayError:
    return GatewayError(
        403, f"The token's '{claim}' claim names no tenant of this deployment.", "permission_error", "no_tenant"
    )


@dataclass(frozen=True)
class Tenants:
    """The configured tenants, looked up by claim value and by API key name."""

    claim: str
    default: TenantConfig | None
    ordered: tuple[TenantConfig, ...]
    by_key: Mapping[str, TenantConfig]

    @classmethod
    def of(cls, cfg: TenantsConfig) -> "Tenants":
        named = {t.name: t for t in cfg.tenants}
        return cls(
            claim=cfg.claim,
            default=named[cfg.default] if cfg.default else None,
            ordered=tuple(cfg.tenants),
            by_key={k: t for t in cfg.tenants for k in t.keys},
        )

    def for_claims(self, claims: Mapping[str, Any]) -> TenantConfig | None:
        """The first tenant, in the configured order, that one of the claim's values names (a
        caller in several groups gets the same tenant on every gateway); else the default."""
        value = claims.get(self.claim)
        values = (
            {value}
            if isinstance(value, str)
            else {v for v in value if isinstance(v, str)}
            if isinstance(value, list)
            else set()
        )
        for tenant in self.ordered:
            if values.intersection(tenant.claim_values or (tenant.name,)):
                return tenant
        return self.default

    def for_token(self, caller: ApiKey, claims: Mapping[str, Any]) -> ApiKey:
        """`caller` under its claim's tenant; 403 when none matches and there is no default."""
        tenant = self.for_claims(claims)
        if tenant is None:
            raise no_tenant(self.claim)
        return apply(caller, tenant)

    def for_key(self, key: ApiKey) -> ApiKey:
        """An API key under the tenant that lists it, else as it is."""
        tenant = self.by_key.get(key.name)
        return key if tenant is None else apply(key, tenant)


def apply(caller: ApiKey, tenant: TenantConfig) -> ApiKey:
    """The tenant's policy in place of the caller's own; name, expiry and tester role kept."""
    return replace(
        caller,
        tenant=tenant.name,
        rpm=tenant.rpm,
        tpm=tenant.tpm,
        models=frozenset(tenant.models),
        quota_tokens=tenant.quota_tokens,
        quota_period=tenant.quota_period,
    )
