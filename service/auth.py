"""API keys: the hosts' hash file, reloaded when it changes, and the request dependency."""

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import Depends, Request
from pydantic import ValidationError

from service.errors import GatewayError
from service.keyfile import QUOTAS_FILE_NAME, ROLES_FILE_NAME, HostKeyFile, HostKeyRoles, HostQuotaFile

if TYPE_CHECKING:
    from service.config import JWTConfig
    from service.jwt_auth import Verifier

log = logging.getLogger("service.auth")


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    digest: bytes
    rpm: int | None = None
    tpm: int | None = None
    models: frozenset[str] = frozenset()
    expires: float | None = None  # epoch seconds
    quota_tokens: int | None = None  # per quota_period, across every gateway (service/usage.py)
    quota_period: str | None = None  # "day" or "month", UTC
    release_tester: bool = False  # may send the stage header (key_roles.json)
    # The tenant whose policy (models, rpm/tpm, quota: service/tenants.py) replaced the fields
    # above; its callers share its buckets and quota, on every gateway.
    tenant: str | None = None

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def limit_name(self) -> str:
        """Whose rate buckets and quota counter a request is charged to: its tenant's, shared by
        the tenant's callers ('/' is in no key name), else its own."""
        return f"tenant/{self.tenant}" if self.tenant else self.name

    @property
    def limit_owner(self) -> str:
        """Who the limits belong to, for a 429's message."""
        return f"tenant '{self.tenant}'" if self.tenant else f"key '{self.name}'"


# No keys file: a lab or a test, where every caller is trusted alike.
ANONYMOUS = ApiKey(name="anonymous", digest=b"", release_tester=True)


def _unauthorized(message: str, code: str = "invalid_api_key") -> GatewayError:
    return GatewayError(401, message, "authentication_error", code, {"WWW-Authenticate": "Bearer"})


class TenantChoice(Protocol):
    """Puts a caller in its tenant (service/tenants.py, which imports this module)."""

    def for_token(self, caller: ApiKey, claims: Mapping[str, Any]) -> ApiKey: ...

    def for_key(self, key: ApiKey) -> ApiKey: ...


_FileStamp = tuple[int, int, int, int] | None  # None: no such file
_Stamp = tuple[_FileStamp, ...]


class KeyRing:
    """The keys a gateway accepts. `path=None` means anonymous access (explicitly configured).

    Token quotas come from quotas.json and roles from key_roles.json beside the keys file
    (service/keyfile.py says why they are apart); a missing file means no quotas, no roles.
    `digests` are the sha256 of the files as last loaded: the control machine reads them
    (/readyz, with the scrape token) to tell that a pushed file was taken.
    """

    def __init__(self, path: Path | None, jwt: "Verifier | None" = None, tenants: TenantChoice | None = None) -> None:
        self.path = path
        self.jwt = jwt  # bearer JWTs beside the keys (service/jwt_auth.py); None: keys only
        self.tenants = tenants  # policies callers share (service/tenants.py); None: each its own
        self._keys: tuple[ApiKey, ...] = ()
        self._stamp: _Stamp | None = None
        self.digests: dict[str, str | None] = {"keys_sha256": None, "quotas_sha256": None, "roles_sha256": None}
        if path is not None:
            self._keys, self._stamp, self.digests = self._read(path)

    @staticmethod
    def _stat(path: Path) -> _FileStamp:
        # ctime too: an edit that keeps size and mtime (touch -r) still changes it.
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)

    @classmethod
    def _stamps(cls, path: Path) -> _Stamp:
        return tuple(cls._stat(p) for p in (path, path.with_name(QUOTAS_FILE_NAME), path.with_name(ROLES_FILE_NAME)))

    @staticmethod
    def _optional(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    @classmethod
    def _read(cls, path: Path) -> tuple[tuple[ApiKey, ...], _Stamp, dict[str, str | None]]:
        """Parse the files; raises OSError/ValueError so a bad file never replaces good keys."""
        stamp = cls._stamps(path)
        if stamp[0] is None:
            raise FileNotFoundError(f"no keys file {path}")
        raw = path.read_bytes()
        parsed = HostKeyFile.model_validate(json.loads(raw))
        quota_raw = cls._optional(path.with_name(QUOTAS_FILE_NAME))
        quotas: dict[str, tuple[int, str]] = {}
        if quota_raw is not None:
            quotas = {
                q.name: (q.tokens, q.period)
                for q in HostQuotaFile.model_validate(json.loads(quota_raw)).quotas
            }
        roles_raw = cls._optional(path.with_name(ROLES_FILE_NAME))
        testers = (
            frozenset(HostKeyRoles.model_validate(json.loads(roles_raw)).release_testers)
            if roles_raw is not None else frozenset()
        )
        keys = tuple(
            ApiKey(
                name=k.name,
                digest=bytes.fromhex(k.sha256),
                rpm=k.rpm,
                tpm=k.tpm,
                models=frozenset(k.models),
                expires=k.expires.timestamp() if k.expires else None,
                quota_tokens=quotas[k.name][0] if k.name in quotas else None,
                quota_period=quotas[k.name][1] if k.name in quotas else None,
                release_tester=k.name in testers,
            )
            for k in parsed.keys
        )
        digests = {
            "keys_sha256": hashlib.sha256(raw).hexdigest(),
            "quotas_sha256": hashlib.sha256(quota_raw).hexdigest() if quota_raw is not None else None,
            "roles_sha256": hashlib.sha256(roles_raw).hexdigest() if roles_raw is not None else None,
        }
        return keys, stamp, digests

    async def watch(self, interval: float = 1.0) -> None:
        """Reload when any of the files changes; three stats per interval."""
        if self.path is None:
            return
        path = self.path
        while True:
            await asyncio.sleep(interval)
            try:
                if await asyncio.to_thread(self._stamps, path) == self._stamp:
                    continue
                self._keys, self._stamp, self.digests = await asyncio.to_thread(self._read, path)
                log.info("reloaded %d API keys from %s", len(self._keys), path)
            except (OSError, ValueError, ValidationError) as exc:
                log.error("keeping the previous API keys: cannot load %s: %s", path, exc)

    def loaded(self) -> tuple[ApiKey, ...]:
        return self._keys

    def with_quota(self) -> list[str]:
        """Names of the keys that have a token quota."""
        return [k.name for k in self._keys if k.quota_tokens]

    async def identify(self, authorization: str | None) -> ApiKey:
        """`authenticate`, or with JWTs configured, a bearer that looks like one checked as one."""
        if self.jwt is not None and authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and self.jwt.claims_token(token):
                return await self._from_jwt(self.jwt, token)
        key = self.authenticate(authorization)
        return key if self.tenants is None else self.tenants.for_key(key)

    async def _from_jwt(self, verifier: "Verifier", token: str) -> ApiKey:
        # Here, not at the top: only a gateway that accepts JWTs loads the JOSE library.
        from service.jwt_auth import Invalid, subject_name

        try:
            issuer, subject, expires, claims = await verifier.verify(token)
        except Invalid as exc:
            verifier.refusals.refused(str(exc))  # the reason, never the token
            raise _unauthorized("Invalid or expired token.", "invalid_token") from None
        caller = ApiKey(name=subject_name(issuer, subject), digest=b"", expires=expires)
        return caller if self.tenants is None else self.tenants.for_token(caller, claims)

    def authenticate(self, authorization: str | None) -> ApiKey:
        if self.path is None:
            return ANONYMOUS
        if not authorization:
            raise _unauthorized(
                "Missing API key: send 'Authorization: Bearer <key>'.", "missing_api_key"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("Malformed Authorization header: expected 'Bearer <key>'.")
        digest = hashlib.sha256(token.strip().encode()).digest()
        found = None
        # Every stored hash is compared, in constant time, so timing tells nothing about which
        # key (if any) matched.
        for key in self._keys:
            if hmac.compare_digest(key.digest, digest):
                found = key
        if found is None:
            raise _unauthorized("Incorrect API key provided.")
        if found.expires is not None and time.time() >= found.expires:
            raise _unauthorized("This API key has expired.", "expired_api_key")
        return found


def jwt_verifier(cfg: "JWTConfig | None") -> "Verifier | None":
    """The bearer-JWT verifier for a config's jwt section; its JWKS file, if any, is read now
    (a missing or keyless one fails start-up, loudly)."""
    if cfg is None:
        return None
    from service.jwt_auth import Verifier  # only gateways that accept JWTs load the JOSE library

    return Verifier(cfg)


async def require_key(request: Request) -> ApiKey:
    """The key AdmissionMiddleware (service/limits.py) checked from the headers of every /v1/
    request, before reading its body."""
    key: ApiKey = request.state.key
    return key


KeyDep = Annotated[ApiKey, Depends(require_key)]
