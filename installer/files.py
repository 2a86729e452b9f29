"""Writing files the control machine keeps secret (keys, certificates, passwords)."""

import os
import shutil
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes, mode: int) -> None:
    """Atomic replace, created with its final mode (a key is never readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_private(path: Path, text: str) -> None:
    """Atomic replace of a 0600 text file: created 0600, so no moment exists when others can read it."""
    atomic_write(path, text.encode("utf-8"), 0o600)


def publish_dir(tmp: Path, entry: Path) -> None:
    """Rename the complete folder `tmp` into place as the cache entry `entry` (readable by all).

    A cache entry is either absent or whole. Another process that filled the same entry first
    made an equivalent one: keep it and drop `tmp`.
    """
    os.chmod(tmp, 0o755)
    try:
        os.replace(tmp, entry)
    except OSError:
        if not entry.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
