"""`installer bundle build`: the inventory's bundle built (or taken from the cache) and written
as one tar, signed with the given key, else the state's signing key when there is one."""

from dataclasses import dataclass
from pathlib import Path

from installer.bundle import build, sign
from installer.bundle.manifest import MANIFEST, Manifest
from installer.inventory import Inventory


@dataclass(frozen=True)
class WrittenBundle:
    manifest: Manifest
    built: bool  # False: the cached build was reused
    key: Path | None  # the signing key's file; None: unsigned
    key_id: str | None


def build_tar(inv: Inventory, output: Path, sign_key: Path | None, progress: build.Progress) -> WrittenBundle:
    key = sign_key or (sign.default_private_key() if sign.default_private_key().is_file() else None)
    private = sign.load_private_key(key) if key is not None else None  # a bad key fails first
    root, man, built = build.build(inv, progress=progress)
    signature = sign.signature_for((root / MANIFEST).read_bytes(), private) if private else None
    build.write_tar(root, output, signature=signature)
    if private is None:
        return WrittenBundle(man, built, None, None)
    return WrittenBundle(man, built, key, sign.key_id(private.public_key()))
