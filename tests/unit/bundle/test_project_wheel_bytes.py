"""The gateway wheel is part of the release id, so one source must pack to one set of bytes."""

import hashlib
import zipfile
from pathlib import Path

from installer.bundle import project_wheel


def _wheel(path: Path, entries: list[tuple[str, bytes]], stamp: tuple[int, int, int, int, int, int]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(zipfile.ZipInfo(name, stamp), data)
    return path


def test_two_builds_of_one_source_are_byte_identical_after_normalising(tmp_path: Path) -> None:
    entries = [("service/app.py", b"print(1)\n"), ("x.dist-info/WHEEL", b"Wheel-Version: 1.0\n"),
               ("x.dist-info/RECORD", b"service/app.py,,\n")]
    # pip stamps files with their mtimes and metadata with the build time, in its own order
    a = _wheel(tmp_path / "a.whl", entries, (2026, 12, 2, 2, 8, 0))
    b = _wheel(tmp_path / "b.whl", list(reversed(entries)), (2026, 12, 2, 2, 17, 40))
    assert a.read_bytes() != b.read_bytes()
    project_wheel._normalise(a)
    project_wheel._normalise(b)
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    with zipfile.ZipFile(a) as zf:
        assert {i.filename: zf.read(i) for i in zf.infolist()} == dict(entries)
