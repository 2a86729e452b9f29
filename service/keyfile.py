"""The hosts' API-key file and token-quota file: hashes, limits and quotas only, never a secret.

Quotas live in their own file (`quotas.json` beside `keys.json`) so that keys.json keeps the
schema every earlier gateway reads: those gateways forbid unknown fields, so a quota field in
keys.json would make them keep their old keys (a revoked key staying valid) or, after a
rollback, fail to start. A gateway that knows quotas reads both; an older one ignores quotas.json.

Shared by the control machine (which renders it) and the gateway (which reads it). It imports
nothing but pydantic so the control machine can use it without the gateway's dependencies.
"""

import hashlib
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KEY_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
QuotaPeriod = Literal["day", "month"]


def hash_secret(secret: str) -> str:
    """Hex sha256 of a key; the only form of a key that leaves the control machine."""
    return hashlib.sha256(secret.encode()).hexdigest()


class HostKey(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # The name is a metrics label and appears in the access log, so it is kept short and plain.
    name: str = Field(pattern=KEY_NAME_PATTERN)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    rpm: int | None = Field(default=None, ge=1, description="requests per minute; None: unlimited")
    tpm: int | None = Field(default=None, ge=1, description="tokens per minute; None: unlimited")
    models: list[str] = Field(default_factory=list, description="allowed models; empty: all")
    expires: datetime | None = Field(default=None, description="timezone-aware expiry")


class HostKeyFile(BaseModel):
    """keys.json: exactly the schema of the releases before quotas (see the module's doc)."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    keys: list[HostKey]


QUOTAS_FILE_NAME = "quotas.json"  # beside the keys file; the gateway derives its path from it


class HostQuota(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=KEY_NAME_PATTERN)  # the key's name, unique among unrevoked keys
    tokens: int = Field(ge=1, description="tokens (prompt + completion) per period")
    period: QuotaPeriod = Field(description="UTC day or calendar month")


class HostQuotaFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    quotas: list[HostQuota] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_per_key(self) -> "HostQuotaFile":
        names = [q.name for q in self.quotas]
        if len(names) != len(set(names)):
            raise ValueError("one quota per key name")
        return self


# Beside keys.json too, apart for the same reason as quotas.json: what a key may do beyond
# calling the API. Today one right: sending the release-stage header (service/routing.py), which
# reaches a canary whatever the split and is kept out of the release's figures. The installer's
# probe key has it always; other keys only when created with `--release-tester`.
ROLES_FILE_NAME = "key_roles.json"


class HostKeyRoles(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    release_testers: list[Annotated[str, Field(pattern=KEY_NAME_PATTERN)]] = Field(default_factory=list)
