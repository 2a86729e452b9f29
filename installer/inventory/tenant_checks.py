"""auth.tenants against the rest of the inventory: `validate` and `up` refuse, at the setting's
file and line, a tenant that names a model the deployment does not serve, a name, claim value or
API key in two tenants, and a default tenant that is not one (docs/identity.md#tenants)."""

from collections.abc import Iterator

from installer.inventory.models import Inventory
from installer.inventory.source import Loc


def check(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    auth = inv.auth
    served = [m.served_name for m in inv.served_models()]
    names: dict[str, int] = {}
    claimed: dict[str, int] = {}
    keyed: dict[str, int] = {}
    for i, tenant in enumerate(auth.tenants):
        at: Loc = ("auth", "tenants", i)
        duplicate = tenant.name in names
        if duplicate:
            yield (*at, "name"), f"tenant {tenant.name!r} is also auth.tenants[{names[tenant.name]}]; name each once"
        names.setdefault(tenant.name, i)
        for j, model in enumerate(tenant.models):
            if model not in served:
                yield (
                    (*at, "models", j),
                    (
                        f"tenant {tenant.name!r} names model {model!r}, which this deployment does not serve; "
                        f"use one of {', '.join(served)} (a model's served_name)"
                    ),
                )
        for j, value in enumerate(tenant.claim_values or ([] if duplicate else [tenant.name])):
            if value in claimed and claimed[value] != i:
                loc: Loc = (*at, "claim_values", j) if tenant.claim_values else (*at, "name")
                yield (
                    loc,
                    (
                        f"claim value {value!r} also chooses auth.tenants[{claimed[value]}]; a caller's tenant "
                        "must not depend on the order of the list: give each value to one tenant"
                    ),
                )
            claimed.setdefault(value, i)
        for j, key in enumerate(tenant.keys):
            if key in keyed:
                yield (*at, "keys", j), f"API key {key!r} is also in auth.tenants[{keyed[key]}]; a key is in one tenant"
            keyed.setdefault(key, i)
    if auth.default_tenant is not None and auth.default_tenant not in names:
        yield (
            ("auth", "default_tenant"),
            (
                f"{auth.default_tenant!r} is not a tenant; use one of auth.tenants' names"
                + ("" if names else " (there are none)")
            ),
        )
    if auth.jwt is None and (auth.default_tenant is not None or "tenant_claim" in auth.model_fields_set):
        key = "default_tenant" if auth.default_tenant is not None else "tenant_claim"
        yield ("auth", key), "chooses a token's tenant, but auth.jwt is not set: set auth.jwt or remove it"
