"""files.link_or_copy: the one way the bundle builder puts cached wheels and weights into a bundle (#34)."""

import os
from pathlib import Path

import pytest

from installer.base import files


def test_a_hard_link_shares_the_cache_bytes_and_the_folder_is_created(tmp_path: Path) -> None:
    src = tmp_path / "cache" / "a.whl"
    src.parent.mkdir()
    src.write_bytes(b"wheel")
    dst = tmp_path / "bundle" / "wheels" / "a.whl"
    files.link_or_copy(src, dst)
    assert dst.read_bytes() == b"wheel"
    assert dst.stat().st_ino == src.stat().st_ino


def test_where_no_link_can_be_made_it_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "a.whl"
    src.write_bytes(b"wheel")

    def cross_device(_src: object, _dst: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    dst = tmp_path / "out" / "a.whl"
    files.link_or_copy(src, dst)
    assert dst.read_bytes() == b"wheel"
    assert dst.stat().st_ino != src.stat().st_ino
