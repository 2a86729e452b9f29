"""A lab host's tree is removed with its files unlinked side by side (lab/rootfs.py): everything
under it goes, nothing a symlink points to outside it does."""

import os
from pathlib import Path

from installer.lab import rootfs


def _tree(root: Path, outside: Path) -> None:
    for i in range(30):
        d = root / "opt" / f"pkg{i}" / "sub"
        d.mkdir(parents=True)
        (d / "mod.py").write_text("x")
        (d.parent / "data.bin").write_bytes(b"\0" * 10)
        os.chmod(d / "mod.py", 0o400)  # read-only files go too
    (root / "etc").mkdir()
    (root / "etc" / "link-to-file").symlink_to(outside / "keep.txt")
    (root / "etc" / "link-to-dir").symlink_to(outside, target_is_directory=True)
    (root / "etc" / "dangling").symlink_to(root / "nowhere")
    os.mkfifo(root / "etc" / "fifo")


def test_unlink_files_leaves_only_directories_and_never_follows_a_link(tmp_path: Path) -> None:
    root, outside = tmp_path / "rootfs", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    _tree(root, outside)
    rootfs.unlink_files(root, workers=4)
    left = list(root.rglob("*"))
    assert left and all(p.is_dir() and not p.is_symlink() for p in left)
    assert (outside / "keep.txt").read_text() == "mine"


def test_remove_tree_removes_all_of_it(tmp_path: Path) -> None:
    root, outside = tmp_path / "rootfs", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    _tree(root, outside)
    rootfs.remove_tree(root)
    assert not root.exists()
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
