"""The `auth:` section: JWTs from the organisation's identity provider and the tenants callers
are in (besides API keys, which `installer keys` manages)."""

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from installer.inventory.fields import LocalPath, Strict, matching, unset_dropped

# What the gateways verify tokens with (service/jwks.py says why only these).
JWT_ALGORITHMS = ("RS256", "ES256", "EdDSA")


def _jwt_algorithm(value: Any) -> Any:
    if isinstance(value, str) and value not in JWT_ALGORITHMS:
        why = (
            "an unsigned token is accepted from anyone" if value.lower() == "none" else
            "a shared-secret algorithm: with a JWKS its 'secret' is a public key anyone can read"
            if value.upper().startswith("HS") else "not an algorithm the gateways verify"
        )
        raise ValueError(f"{value!r} is refused ({why}); use {', '.join(JWT_ALGORITHMS)}")
    return value


class JWTAuth(Strict):
    """Bearer JWTs from the organisation's identity provider, accepted beside API keys
    (service/jwt_auth.py, docs/identity.md). The keys come from a JWKS file on this machine,
    pushed to the hosts, or from an intranet https URL each gateway fetches and refreshes."""

    issuers: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]], Field(min_length=1)]
    audiences: Annotated[list[Annotated[str, Field(min_length=1, max_length=512)]], Field(min_length=1)]
    algorithms: Annotated[
        list[Annotated[str, BeforeValidator(_jwt_algorithm)]], Field(min_length=1)
    ] = Field(default_factory=lambda: list(JWT_ALGORITHMS))
    # Leeway on exp, nbf and iat for hosts whose clocks drift from the IdP's.
    clock_skew_s: Annotated[int, Field(ge=0, le=300)] = 60
    jwks_file: LocalPath | None = None
    jwks_url: Annotated[str, matching(
        r"https://[^/\s@?#]+(/[^\s#]*)?", "an https:// URL without a user (e.g. https://idp.example.internal/jwks)"
    )] | None = None
    # The CA bundle the IdP's certificate chains to, pushed to the hosts; None: the hosts' own
    # trust store (where an organisation installs its CA).
    jwks_ca: LocalPath | None = None
    # How long a fetched set is kept; a token with an unknown kid refetches sooner (rotation).
    jwks_refresh_s: Annotated[int, Field(ge=60, le=86_400)] = 300

    @model_validator(mode="after")
    def _one_source(self) -> "JWTAuth":
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("set exactly one of jwks_file (a JWKS on this machine, air-gapped) and jwks_url")
        if self.jwks_ca is not None and self.jwks_url is None:
            raise ValueError("jwks_ca is for jwks_url; remove it or fetch the keys from a URL")
        if len(set(self.algorithms)) != len(self.algorithms):
            raise ValueError(f"algorithms lists one twice: {self.algorithms}")
        return self


# As the gateways and installer usage read tenant names (service/config.py, TENANT_NAME).
TenantName = Annotated[str, matching(
    r"[a-z0-9][a-z0-9_.-]{0,39}", "a tenant name: up to 40 of a-z 0-9 _ . -, starting with a letter or digit"
)]


class Tenant(Strict):
    """A named policy its callers share across every gateway (service/tenants.py,
    docs/identity.md#tenants): the models they may call, rpm/tpm, and a token quota."""

    name: TenantName
    models: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)  # empty: all
    rpm: Annotated[int, Field(ge=1)] | None = None
    tpm: Annotated[int, Field(ge=1)] | None = None
    quota_tokens: Annotated[int, Field(ge=1)] | None = None
    quota_period: Literal["day", "month"] | None = None
    # The values of auth.tenant_claim (group names, say) that choose it; empty: its name.
    claim_values: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(default_factory=list)
    # API keys (`installer keys create --name`) that take this policy in place of their own.
    keys: list[Annotated[str, matching(r"[a-z0-9][a-z0-9_.-]{0,62}", "an API key's name")]] = Field(
        default_factory=list)

    @model_validator(mode="after")
    def _quota_pair(self) -> "Tenant":
        if (self.quota_tokens is None) != (self.quota_period is None):
            raise ValueError("quota_tokens and quota_period go together (e.g. 1000000 and month)")
        return self


class Auth(Strict):
    """Who may call the gateways besides API keys (`installer keys`), and the tenants they are in."""

    jwt: JWTAuth | None = None
    # The token claim that names a caller's tenant: a string, or a list of strings (groups).
    tenant_claim: Annotated[str, Field(min_length=1, max_length=128)] = "groups"
    # The tenant of a token whose claim names none; None: such a token is refused (403).
    default_tenant: TenantName | None = None
    tenants: list[Tenant] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump_tenants_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return unset_dropped(self, handler(self), ("tenant_claim", "default_tenant", "tenants"))
