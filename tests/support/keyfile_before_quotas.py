"""service/keyfile.py as every release before token quotas had it (git show e960b72^:service/keyfile.py),
kept verbatim below this note: the key file a deploy renders today must still be read by it.
"""

import hashlib
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

KEY_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"


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
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    keys: list[HostKey]
