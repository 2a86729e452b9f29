"""The archive's encryption: age (age-encryption.org/v1) through pyrage, the Python binding of
rage. age is a kept, specified format with one way to do each thing: a passphrase (scrypt) or
recipients' public keys (X25519 `age1...`, or `ssh-ed25519`/`ssh-rsa` keys), and an
authenticated payload (ChaCha20-Poly1305 in 64 KiB chunks) that fails on any changed byte. A
file the installer wrote opens with the `age`/`rage` tools too, without the installer.

Passphrases come from a prompt, a file or an environment variable, never from argv (argv is
visible to every user in /proc and lands in shell history and the audit trail).
"""

import getpass
import os
import sys
from pathlib import Path

import pyrage

from installer.state_archive import StateArchiveError

PASSPHRASE_ENV = "PLI_STATE_PASSPHRASE"
AGE_MAGIC = b"age-encryption.org/v1\n"
_NOT_OPENED = ("Decryption failed", "No matching keys found")
_MIN_PASSPHRASE = 12  # the archive holds the CA key and every secret: a short one is refused


def _recipient(text: str) -> object:
    text = text.strip()
    try:
        if text.startswith("age1"):
            return pyrage.x25519.Recipient.from_str(text)
        if text.startswith("ssh-"):
            return pyrage.ssh.Recipient.from_str(text)
    except pyrage.RecipientError as exc:
        raise StateArchiveError(
            f"not a usable recipient key: {text[:40]}...: {exc}",
            ["give an age public key (age1...) or an OpenSSH public key line"],
        ) from exc
    raise StateArchiveError(
        f"not a recipient key: {text[:40]!r}",
        ["give an age public key (age1..., from `age-keygen`) or an OpenSSH public key line"],
    )


def recipients(keys: list[str], files: list[Path]) -> list[object]:
    """Recipients from --recipient values and --recipients-file files (one key a line, # comments)."""
    lines = list(keys)
    for f in files:
        try:
            lines += [ln for ln in f.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        except OSError as exc:
            raise StateArchiveError(f"cannot read {f}: {exc.strerror or exc}") from exc
    return [_recipient(line) for line in lines]


def identities(files: list[Path]) -> list[object]:
    """Private keys from --identity files: age identity files (AGE-SECRET-KEY-1... lines) or an
    OpenSSH private key (unencrypted)."""
    out: list[object] = []
    for f in files:
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise StateArchiveError(f"cannot read the identity {f}: {exc.strerror or exc}") from exc
        try:
            if b"-----BEGIN" in data:
                out.append(pyrage.ssh.Identity.from_buffer(data))
                continue
            keys = [ln.strip() for ln in data.decode().splitlines() if ln.strip().startswith("AGE-SECRET-KEY-")]
            if not keys:
                raise StateArchiveError(f"{f} holds no age identity (AGE-SECRET-KEY-1...) or OpenSSH private key")
            out += [pyrage.x25519.Identity.from_str(k) for k in keys]
        except (pyrage.IdentityError, UnicodeDecodeError) as exc:
            raise StateArchiveError(
                f"{f} is not a usable identity: {exc}",
                ["an age identity file, or an OpenSSH private key without a passphrase"],
            ) from exc
    return out


def passphrase(file: Path | None, *, confirm: bool) -> str:
    """From `file`, else $PLI_STATE_PASSPHRASE, else a prompt on the terminal (asked twice when
    `confirm`, as an export: a typo there would lock the state away)."""
    if file is not None:
        try:
            text = file.read_text().rstrip("\r\n")
        except OSError as exc:
            raise StateArchiveError(f"cannot read the passphrase file {file}: {exc.strerror or exc}") from exc
        source = str(file)
    elif os.environ.get(PASSPHRASE_ENV):
        text, source = os.environ[PASSPHRASE_ENV], f"${PASSPHRASE_ENV}"
    elif sys.stdin.isatty():
        text, source = getpass.getpass("state archive passphrase: "), "the prompt"
        if confirm and getpass.getpass("again: ") != text:
            raise StateArchiveError("the two passphrases differ; nothing was written")
    else:
        raise StateArchiveError(
            "no passphrase: no terminal to ask on, no --passphrase-file, no $" + PASSPHRASE_ENV,
            ["pass --passphrase-file FILE (0600), set $" + PASSPHRASE_ENV + ", or use --recipient / --identity"],
        )
    if confirm and len(text) < _MIN_PASSPHRASE:
        raise StateArchiveError(
            f"the passphrase from {source} is shorter than {_MIN_PASSPHRASE} characters",
            ["the archive holds the CA key and every secret of the deployment: use a long one"],
        )
    if not text:
        raise StateArchiveError(f"the passphrase from {source} is empty")
    return text


def encrypt(data: bytes, *, secret: str | None = None, to: list[object] | None = None) -> bytes:
    if to:
        return pyrage.encrypt(data, to)
    assert secret is not None
    return pyrage.passphrase.encrypt(data, secret)


def is_passphrase_archive(blob: bytes) -> bool:
    """age's header names how the file key is wrapped: one scrypt stanza for a passphrase."""
    return blob.startswith(AGE_MAGIC) and b"\n-> scrypt " in blob[: blob.find(b"\n---")]


def decrypt(blob: bytes, where: Path, *, secret: str | None = None, ids: list[object] | None = None) -> bytes:
    """The archive's plaintext, every byte authenticated before any is returned, or one error
    that says which way it failed: the passphrase or key does not open it, or it was changed."""
    if not blob.startswith(AGE_MAGIC):
        raise StateArchiveError(
            f"{where} is not a state archive (no age header)", ["give the file `installer state export` wrote"]
        )
    try:
        if ids:
            return pyrage.decrypt(blob, ids)
        assert secret is not None
        return pyrage.passphrase.decrypt(blob, secret)
    except pyrage.DecryptError as exc:
        # rage says one of these when no stanza unwraps the file key (a wrong passphrase or key,
        # or a changed stanza), and something else when the header's MAC or a chunk of the
        # payload fails: the file was changed after the key was found.
        if str(exc) in _NOT_OPENED:
            what = "identity" if ids else "passphrase"
            raise StateArchiveError(
                f"the {what} does not open {where} (or its header was changed); nothing was written",
                [f"check the {what}; the archive is unchanged"],
            ) from exc
        raise StateArchiveError(
            f"{where} was changed or damaged after it was written: it fails its authentication "
            f"({exc}); nothing was written",
            ["use an intact copy of the archive"],
        ) from exc
