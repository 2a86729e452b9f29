"""Two tenants in the e2e suite's shared lab inventory (#38): an `auth` section appended to the
inventory `installer lab up` wrote, before the suite's first `installer up`, so the one shared
deployment has them from the start (a second `up` only for them would cost minutes).

The identity provider is tests/support/idp.py: an RS256 key made here, its public JWKS carried to
the hosts as `auth.jwt.jwks_file`. One API key, made with the real CLI before the first `up` (so
`validate` finds it in the key store), is in the second tenant beside its token callers. Only
rpm limits: they refill within a minute, so the tests after the check see no leftover refusal,
and a tenant without `models` serves every model the later tests deploy (test_models renders
inventories of its own)."""

import json
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support import idp
from tests.support.e2e import installer

RED, BLUE = "e2e-red", "e2e-blue"
RPM = 2  # small, so a handful of requests reaches each tenant's limit (each one costs the CPU engine)


@dataclass(frozen=True)
class LabTenants:
    signer: idp.SigningKey
    key_name: str  # the API key in BLUE
    key_secret: str

    def token(self, subject: str, *groups: str) -> str:
        # An hour: the suite's first `up` takes minutes before the tenants' test runs.
        return self.signer.token(sub=subject, groups=list(groups), exp=int(time.time()) + 3600)


def section(jwks_file: Path, key_name: str) -> str:
    """The inventory's `auth` section: RED chosen by the `groups` claim value `red`, BLUE by
    `blue` or by its API key; no default tenant, so a token of neither group gets a 403."""
    return "\n".join([
        "# two tenants for the e2e suite (tests/support/lab_tenants.py)",
        "auth:",
        "  jwt:",
        f"    issuers: [{idp.ISSUER}]",
        f"    audiences: [{idp.AUDIENCE}]",
        "    algorithms: [RS256]",
        f"    jwks_file: {json.dumps(str(jwks_file))}",
        "  tenants:",
        f"    - name: {RED}",
        f"      rpm: {RPM}",
        "      claim_values: [red]",
        f"    - name: {BLUE}",
        f"      rpm: {RPM}",
        "      claim_values: [blue]",
        f"      keys: [{key_name}]",
    ]) + "\n"


def setup(inventory: Path, state: Path) -> LabTenants:
    """Make the IdP key and the tenant's API key, and append the `auth` section to `inventory`
    (rewritten by each `lab up`, so appended once per run)."""
    signer = idp.make_key("RS256", f"e2e-{int(time.time())}")
    jwks_file = state / "lab-jwks.json"
    jwks_file.write_text(json.dumps(idp.jwks(signer)))
    # A name per run: the state folder (and its key store) outlives a run on a developer machine.
    key_name = f"tenant-blue-{int(time.time())}"
    proc = installer("keys", "create", "--name", key_name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    secret = next(line for line in proc.stdout.splitlines() if line.startswith("sk-pli-"))
    with inventory.open("a") as out:
        out.write(section(jwks_file.resolve(), key_name))
    return LabTenants(signer, key_name, secret)
