"""Ed25519 signatures over a bundle's manifest.json.

The manifest lists every file of the bundle with its sha256, so signing its exact bytes signs
the whole bundle: `manifest.json.sig` next to it says which key signed and carries the
signature. Trust never comes from the signature file itself: a bundle is accepted only when
its signature verifies against one of the public keys the user trusts (`--trusted-key PATH`,
or every `*.pub` under `state_dir()/keys/`).

Keys are ordinary PEM files (PKCS#8 private key, SubjectPublicKeyInfo public key), so
`openssl pkey -in bundle-signing.key -pubout` works on them. The private key is written 0600
and never leaves the build machine; the air-gapped side needs only the `.pub` file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from installer.base.errors import BundleError
from installer.base.paths import state_dir
from installer.bundle.manifest import MANIFEST, SIGNATURE

KEY_NAME = "bundle-signing"
SIG_FORMAT = 1


def keys_dir() -> Path:
    return state_dir() / "keys"


def default_private_key() -> Path:
    return keys_dir() / f"{KEY_NAME}.key"


def default_trusted_keys() -> list[Path]:
    """Every public key under state_dir()/keys/: the keys trusted when none is named."""
    return sorted(keys_dir().glob("*.pub"))


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    """A short fingerprint users can compare out of band: sha256 of the raw key, 16 hex digits."""
    return hashlib.sha256(_raw(public)).hexdigest()[:16]


@dataclass(frozen=True)
class KeyPair:
    private_key: Path
    public_key: Path
    key_id: str


def keygen(directory: Path | None = None, name: str = KEY_NAME, *, force: bool = False) -> KeyPair:
    """Write `<name>.key` (0600) and `<name>.pub` under `directory` (default state_dir()/keys)."""
    directory = directory or keys_dir()
    priv_path, pub_path = directory / f"{name}.key", directory / f"{name}.pub"
    existing = [p for p in (priv_path, pub_path) if p.exists()]
    if existing and not force:
        raise BundleError(
            f"{existing[0]} already exists: bundles signed with it would no longer verify "
            "against a new key",
            ["keep it, or pass --force to replace it (then re-distribute the new .pub file)"],
        )
    directory.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    tmp = priv_path.with_name(priv_path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    # Created 0600 from the start: never a moment where the key is readable by others.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.replace(tmp, priv_path)
    pub_path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return KeyPair(priv_path, pub_path, key_id(private.public_key()))


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BundleError(f"cannot read the signing key {path}: {exc.strerror}") from exc
    mode = path.stat().st_mode & 0o077
    if mode:
        raise BundleError(
            f"the signing key {path} is readable by other users "
            f"(mode {path.stat().st_mode & 0o777:o})",
            [f"fix: chmod 600 {path}"],
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise BundleError(f"{path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path} is not an ed25519 key; make one with `installer bundle keygen`")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise BundleError(f"cannot read the trusted key {path}: {exc.strerror}") from exc
    except (ValueError, TypeError) as exc:
        raise BundleError(f"{path} is not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(f"{path} is not an ed25519 public key")
    return key


def signature_for(manifest_bytes: bytes, private: Ed25519PrivateKey) -> bytes:
    """manifest.json.sig's content for these exact manifest bytes (ed25519 is deterministic)."""
    doc = {
        "format": SIG_FORMAT,
        "algorithm": "ed25519",
        "key_id": key_id(private.public_key()),
        "public_key": base64.b64encode(_raw(private.public_key())).decode(),
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "signature": base64.b64encode(private.sign(manifest_bytes)).decode(),
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class Trust:
    """What the caller trusts: explicit public keys (else the default ones), or nothing at all."""

    keys: tuple[Path, ...] = ()
    insecure: bool = False

    def public_keys(self) -> list[tuple[Path, Ed25519PublicKey]]:
        paths = list(self.keys) or default_trusted_keys()
        return [(p, load_public_key(p)) for p in paths]


@dataclass(frozen=True)
class SignatureCheck:
    """The outcome of checking a bundle's signature. `trusted_key` is None only when insecure."""

    key_id: str | None
    trusted_key: Path | None
    insecure_reason: str | None = None

    @property
    def describe(self) -> str:
        if self.trusted_key is not None:
            return f"signed by trusted key {self.key_id} ({self.trusted_key})"
        return f"INSECURE: {self.insecure_reason}; accepted only because of --insecure"


class _Refused(Exception):
    def __init__(self, message: str, fixes: list[str], signer: str | None) -> None:
        super().__init__(message)
        self.message, self.fixes, self.signer = message, fixes, signer


def _check(manifest_bytes: bytes, sig_bytes: bytes | None, trust: Trust) -> SignatureCheck:
    if sig_bytes is None:
        raise _Refused(
            f"the bundle is not signed (no {SIGNATURE})",
            ["sign it: `installer bundle keygen`, then `installer bundle build`"],
            None,
        )
    try:
        doc = json.loads(sig_bytes)
        if doc.get("format") != SIG_FORMAT or doc.get("algorithm") != "ed25519":
            raise ValueError(
                f"unsupported signature format {doc.get('format')!r}/{doc.get('algorithm')!r}"
            )
        signature = base64.b64decode(doc["signature"], validate=True)
        signer_raw = base64.b64decode(doc["public_key"], validate=True)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _Refused(
            f"{SIGNATURE} is unreadable: {exc}",
            ["re-copy the bundle, or rebuild and sign it"],
            None,
        ) from exc
    signer = hashlib.sha256(signer_raw).hexdigest()[:16]
    try:
        trusted = trust.public_keys()
    except BundleError as exc:
        raise _Refused(str(exc), ["fix or remove that key file"], signer) from exc
    if not trusted:
        raise _Refused(
            f"no trusted public key to check the signature of key {signer} against",
            [
                f"put the builder's public key in {keys_dir()}/ or pass --trusted-key PATH",
                "(it is the .pub file next to the key `installer bundle keygen` made)",
            ],
            signer,
        )
    match = [(p, k) for p, k in trusted if _raw(k) == signer_raw]
    if not match:
        raise _Refused(
            f"the bundle is signed by key {signer}, which is not one of the trusted keys",
            [
                *[f"trusted: {p} ({key_id(k)})" for p, k in trusted][:5],
                "get the builder's .pub file through a channel you trust, then --trusted-key PATH",
            ],
            signer,
        )
    path, public = match[0]
    try:
        public.verify(signature, manifest_bytes)
    except InvalidSignature:
        raise _Refused(
            f"the signature of key {signer} does not match {MANIFEST}: "
            "the bundle was changed after it was signed",
            ["do not use this bundle; copy it again from the original, or rebuild it"],
            signer,
        ) from None
    return SignatureCheck(key_id=signer, trusted_key=path)


def check_signature(
    manifest_bytes: bytes, sig_bytes: bytes | None, trust: Trust, where: str
) -> SignatureCheck:
    """Verify the signature over manifest_bytes; raise BundleError unless trusted or insecure."""
    try:
        return _check(manifest_bytes, sig_bytes, trust)
    except _Refused as refused:
        if trust.insecure:
            return SignatureCheck(refused.signer, None, insecure_reason=refused.message)
        raise BundleError(
            f"refusing bundle {where}: {refused.message}",
            [
                *refused.fixes,
                "(--insecure skips this check: only for a bundle whose origin you know)",
            ],
        ) from None
