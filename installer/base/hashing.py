"""sha256 of files, in parallel: hashlib releases the GIL, so threads use every core."""

import hashlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_CHUNK = 4 * 1024 * 1024


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_files(paths: Iterable[Path], workers: int = 4) -> dict[Path, str]:
    paths = list(paths)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(paths, pool.map(sha256_file, paths), strict=True))
