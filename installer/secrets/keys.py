"""API keys on the control machine.

The store (`.installer/keys.json`, mode 0600) keeps each key's name, sha256, limits, expiry and
revocation, never the secret itself: the secret is shown once, at creation, and cannot be
shown again. Hosts get `render_hosts_file()`: the active keys' hashes and limits only.
"""

import hmac
import re
import secrets
from datetime import UTC, date, datetime, time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from installer.base.errors import InstallerError
from installer.base.files import write_private
from installer.base.paths import resolve_state_dir, state_dir
from service.keyfile import (
    KEY_NAME_PATTERN,
    QUOTAS_FILE_NAME,
    ROLES_FILE_NAME,
    HostKey,
    HostKeyFile,
    HostKeyRoles,
    HostQuota,
    HostQuotaFile,
    QuotaPeriod,
    hash_secret,
)

SECRET_PREFIX = "sk-pli-"


class KeyStoreError(InstallerError):
    """A key command was given a bad name, limit or date, or the key store is unreadable."""


class KeyRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=KEY_NAME_PATTERN)
    sha256: str
    created: datetime
    rpm: int | None = None
    tpm: int | None = None
    models: list[str] = Field(default_factory=list)
    expires: datetime | None = None
    revoked: datetime | None = None
    quota_tokens: int | None = None
    quota_period: QuotaPeriod | None = None
    # May send the release-stage header (a canary's testers; service/keyfile.py HostKeyRoles).
    release_tester: bool = False

    def status(self, now: datetime) -> str:
        if self.revoked:
            return "revoked"
        if self.expires and now >= self.expires:
            return "expired"
        return "active"


class KeyStore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    keys: list[KeyRecord] = Field(default_factory=list)


def store_path() -> Path:
    return state_dir() / "keys.json"


def names_in_store() -> tuple[Path, set[str]] | None:
    """(the store, every key name it holds, revoked ones too), or None where there is no store
    (`validate` run away from the control machine's state folder). Makes no folder, unlike
    store_path(): `validate` changes nothing."""
    path = resolve_state_dir()[0] / "keys.json"
    if not path.is_file():
        return None
    return path, {k.name for k in load(path).keys}


def parse_expiry(text: str) -> datetime:
    """A date (the key stops working at 00:00 UTC that day) or an ISO datetime (UTC if naive)."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise KeyStoreError(f"--expires {text!r}: expected YYYY-MM-DD or an ISO date-time") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def load(path: Path | None = None) -> KeyStore:
    path = path or store_path()
    if not path.exists():
        return KeyStore()
    try:
        return KeyStore.model_validate_json(path.read_bytes())
    except ValueError as exc:
        raise KeyStoreError(f"cannot read the key store {path}: {exc}") from exc


def save(store: KeyStore, path: Path | None = None) -> None:
    write_private(path or store_path(), store.model_dump_json(indent=2) + "\n")


def _check_quota(tokens: int | None, period: str | None) -> None:
    if tokens is not None and tokens < 1:
        raise KeyStoreError("--quota-tokens must be at least 1 (leave it out for no quota)")
    if (tokens is None) != (period is None):
        raise KeyStoreError(
            "--quota-tokens and --quota-period go together (e.g. --quota-tokens 1000000 --quota-period month)"
        )
    if period is not None and period not in ("day", "month"):
        raise KeyStoreError(f"--quota-period {period!r}: use day or month (UTC)")


def create(
    name: str,
    *,
    rpm: int | None = None,
    tpm: int | None = None,
    models: list[str] | None = None,
    expires: datetime | None = None,
    quota_tokens: int | None = None,
    quota_period: QuotaPeriod | None = None,
    release_tester: bool = False,
    path: Path | None = None,
) -> tuple[KeyRecord, str]:
    """Add a key; returns its record and the secret, which exists nowhere else afterwards."""
    if not re.fullmatch(KEY_NAME_PATTERN, name):
        raise KeyStoreError(
            f"key name {name!r}: use 1-63 of a-z 0-9 _ . - (starting with a letter or digit)"
        )
    for label, value in (("--rpm", rpm), ("--tpm", tpm)):
        if value is not None and value < 1:
            raise KeyStoreError(f"{label} must be at least 1 (leave it out for no limit)")
    _check_quota(quota_tokens, quota_period)
    now = datetime.now(UTC)
    if expires is not None and expires <= now:
        raise KeyStoreError(f"--expires {expires.isoformat()} is in the past")
    store = load(path)
    if any(k.name == name and k.status(now) == "active" for k in store.keys):
        raise KeyStoreError(
            f"an active key named {name!r} exists; revoke it first or pick another name"
        )
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    record = KeyRecord(
        name=name,
        sha256=hash_secret(secret),
        created=now,
        rpm=rpm,
        tpm=tpm,
        models=models or [],
        expires=expires,
        quota_tokens=quota_tokens,
        quota_period=quota_period,
        release_tester=release_tester,
    )
    store.keys.append(record)
    save(store, path)
    return record, secret


def revoke(name: str, path: Path | None = None) -> KeyRecord:
    store = load(path)
    now = datetime.now(UTC)
    active = [k for k in store.keys if k.name == name and not k.revoked]
    if not active:
        raise KeyStoreError(f"no unrevoked key named {name!r}")
    for record in active:
        record.revoked = now
    save(store, path)
    return active[-1]


def set_quota(
    name: str, quota_tokens: int | None, quota_period: QuotaPeriod | None, path: Path | None = None
) -> KeyRecord:
    """Set (or with None and None, remove) the token quota of the active key `name`."""
    _check_quota(quota_tokens, quota_period)
    store = load(path)
    now = datetime.now(UTC)
    active = [k for k in store.keys if k.name == name and k.status(now) == "active"]
    if not active:
        raise KeyStoreError(f"no active key named {name!r}", ["`installer keys list` shows the keys"])
    for record in active:
        record.quota_tokens, record.quota_period = quota_tokens, quota_period
    save(store, path)
    return active[-1]


def render_hosts_file(store: KeyStore) -> str:
    """The gateways' keys file: unrevoked keys' hashes and limits (expired ones too: the
    gateway refuses them itself, with a message that says why), in the schema every gateway
    release reads; quotas go to render_quotas_file (service/keyfile.py says why)."""
    keys = [
        HostKey(name=k.name, sha256=k.sha256, rpm=k.rpm, tpm=k.tpm, models=k.models, expires=k.expires)
        for k in store.keys
        if not k.revoked
    ]
    return HostKeyFile(keys=keys).model_dump_json(indent=2) + "\n"


def render_quotas_file(store: KeyStore) -> str:
    """The gateways' quotas.json: the token quota of each unrevoked key that has one."""
    quotas = {
        k.name: HostQuota(name=k.name, tokens=k.quota_tokens, period=k.quota_period)
        for k in store.keys
        if not k.revoked and k.quota_tokens and k.quota_period
    }
    return HostQuotaFile(quotas=list(quotas.values())).model_dump_json(indent=2) + "\n"


def render_roles_file(store: KeyStore) -> str:
    """The gateways' key_roles.json: the keys that may send the release-stage header, the
    installer's probe key always (its release gates ask a stage by name)."""
    testers = {PROBE_KEY_NAME} | {k.name for k in store.keys if not k.revoked and k.release_tester}
    return HostKeyRoles(release_testers=sorted(testers)).model_dump_json(indent=2) + "\n"


def write_hosts_file(dest: Path, store: KeyStore | None = None) -> None:
    """Write the hosts' files (keys.json at dest, quotas.json and key_roles.json beside it)
    atomically, so a gateway watching them never reads half a file; keys last, so the new keys
    come with their quotas and roles."""
    store = store or load()
    write_private(dest.with_name(QUOTAS_FILE_NAME), render_quotas_file(store))
    write_private(dest.with_name(ROLES_FILE_NAME), render_roles_file(store))
    write_private(dest, render_hosts_file(store))


PROBE_KEY_NAME = "installer-probe"
PROBE_RPM = 120


def probe_secret_path() -> Path:
    return state_dir() / "probe-key"


def ensure_probe_key(path: Path | None = None) -> str:
    """The installer's own key for proving a deployment answers through its gateways.

    Unlike user keys its secret is kept (0600, beside the store) because every `installer up`
    needs it; if the two ever disagree, the old key is revoked and a new one made.
    """
    secret_file = probe_secret_path()
    store = load(path)
    now = datetime.now(UTC)
    active = [k for k in store.keys if k.name == PROBE_KEY_NAME and k.status(now) == "active"]
    if secret_file.is_file():
        secret = secret_file.read_text().strip()
        if any(hmac.compare_digest(k.sha256, hash_secret(secret)) for k in active):
            return secret
    if active:
        revoke(PROBE_KEY_NAME, path)
    _record, secret = create(PROBE_KEY_NAME, rpm=PROBE_RPM, path=path)
    write_private(secret_file, secret + "\n")
    return secret
