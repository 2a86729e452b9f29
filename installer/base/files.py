"""Writing files on the control machine: secret ones (keys, certificates, passwords), whole cache
entries, and bundle files that share the cache's bytes."""

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


def link_or_copy(src: Path, dst: Path) -> None:
    """Put `src` at `dst`, creating its folder: wheels and weights are large, so share the bytes
    with the cache by a hard link, and copy only where no link can be made (another filesystem)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
