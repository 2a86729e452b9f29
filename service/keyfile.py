"""The hosts' API-key file: hashes and limits only, never a secret.

Shared by the control machine (which renders it) and the gateway (which reads it). It imports
nothing but pydantic so the control machine can use it without the gateway's dependencies.
"""

import hashlib
from datetime import datetime
from typing import Literal

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
    quota_tokens: int | None = Field(
        default=None, ge=1, description="tokens (prompt + completion) per quota_period; None: no quota"
    )
    quota_period: QuotaPeriod | None = Field(default=None, description="UTC day or calendar month")

    @model_validator(mode="after")
    def _quota_pair(self) -> "HostKey":
        if (self.quota_tokens is None) != (self.quota_period is None):
            raise ValueError("quota_tokens and quota_period go together")
        return self


class HostKeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    keys: list[HostKey]
