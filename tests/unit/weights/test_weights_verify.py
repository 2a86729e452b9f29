"""The host-side weights verifier in-process: manifest paths, pieces of large files, and the
cache's key and what invalidates it (CHUNK made small so pieces need no large files)."""

import json
import os
from pathlib import Path

import pytest

from installer.weights import verify as wv


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wv, "CHUNK", 1000)
    # files the tests make are seconds old: the racy window would keep them out of the cache
    monkeypatch.setattr(wv, "_RACY_NS", -(10**12))


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"architectures": ["X"]}')
    (root / "model-00001.safetensors").write_bytes(bytes(range(256)) * 10)  # 2560 bytes: 3 pieces
    (root / "sub" / "tokenizer.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    "path", ["../x", "/etc/passwd", "a/../../b", "a//b", "./a", "", "a/", "a\\..\\b", "a/\0b"]
)
def test_a_manifest_path_escaping_the_folder_is_refused(path: str) -> None:
    with pytest.raises(ValueError):
        wv.check_path(path)


def test_a_manifest_path_inside_the_folder_is_accepted() -> None:
    assert wv.check_path("sub/model-00001.safetensors") == "sub/model-00001.safetensors"


def test_entries_are_refused_when_malformed(tmp_path: Path) -> None:
    entries = wv.describe(str(folder(tmp_path)))
    big = next(e for e in entries if e["path"].endswith(".safetensors"))
    with pytest.raises(ValueError, match="listed twice"):
        wv.check_entries([*entries, big])
    with pytest.raises(ValueError, match="chunks must be 3"):
        wv.check_entries([{**big, "chunks": big["chunks"][:2]}])
    with pytest.raises(ValueError, match="not 64 hex"):
        wv.check_entries([{**big, "sha256": "x" * 64}])
    with pytest.raises(ValueError, match="only"):
        wv.check_entries([{**big, "mode": 420}])


def test_describe_lists_whole_and_piece_hashes(tmp_path: Path) -> None:
    import hashlib

    root = folder(tmp_path)
    entries = {e["path"]: e for e in wv.describe(str(root))}
    assert sorted(entries) == ["config.json", "model-00001.safetensors", "sub/tokenizer.json"]
    data = (root / "model-00001.safetensors").read_bytes()
    big = entries["model-00001.safetensors"]
    assert big["sha256"] == hashlib.sha256(data).hexdigest()
    assert big["chunks"] == [hashlib.sha256(data[i : i + 1000]).hexdigest() for i in (0, 1000, 2000)]
    assert "chunks" not in entries["config.json"]


def test_a_flipped_byte_in_a_piece_is_named_with_its_range(tmp_path: Path) -> None:
    root = folder(tmp_path)
    entries = wv.describe(str(root))
    with (root / "model-00001.safetensors").open("r+b") as fh:
        fh.seek(1500)
        fh.write(b"\xff" if fh.read(1) != b"\xff" else b"\x00")
    result = wv.verify(str(root), entries, workers=2)
    assert result.problems == [
        "model-00001.safetensors: sha256 differs from the signed manifest (bytes 1000-1999)"
    ]


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    root = folder(tmp_path)
    (tmp_path / "outside.bin").write_bytes(b"secret")
    (root / "extra.bin").symlink_to(tmp_path / "outside.bin")
    with pytest.raises(ValueError, match=r"extra\.bin: a symlink to .*outside the model folder"):
        wv.describe(str(root))
    result = wv.verify(str(root), [])
    assert any("extra.bin: a symlink to" in p for p in result.problems)


def test_the_cache_key_is_device_inode_size_mtime_ctime(tmp_path: Path) -> None:
    path = folder(tmp_path) / "config.json"
    st = path.stat()
    assert wv.stat_key(st) == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def verified(root: Path, entries: list[dict], cache: Path, full: bool = False) -> wv.Result:
    result = wv.verify(str(root), entries, str(cache), full=full, workers=2)
    assert result.problems == []
    return result


def test_a_second_verify_hashes_nothing_and_the_cache_is_0600(tmp_path: Path) -> None:
    root = folder(tmp_path)
    entries = wv.describe(str(root))
    cache = tmp_path / "cache" / "model.json"
    first = verified(root, entries, cache)
    assert (first.hashed_files, first.cached_files) == (3, 0)
    assert cache.stat().st_mode & 0o777 == 0o600
    second = verified(root, entries, cache)
    assert (second.hashed_files, second.hashed_bytes, second.cached_files) == (0, 0, 3)
    full = verified(root, entries, cache, full=True)
    assert (full.hashed_files, full.cached_files) == (3, 0)


@pytest.mark.parametrize("change", ["mtime", "ctime", "inode", "manifest"])
def test_each_part_of_the_key_sends_the_file_to_be_hashed_again(tmp_path: Path, change: str) -> None:
    root = folder(tmp_path)
    entries = wv.describe(str(root))
    cache = tmp_path / "model.json"
    verified(root, entries, cache)
    path = root / "config.json"
    st = path.stat()
    if change == "mtime":
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    elif change == "ctime":  # a chmod moves ctime alone
        cached = json.loads(cache.read_text())["files"]["config.json"]["key"]
        path.chmod(0o600)
        path.chmod(st.st_mode & 0o777)
        if path.stat().st_ctime_ns == cached[4]:
            pytest.fail("the filesystem kept ctime across a chmod; the test cannot see the key")
    elif change == "inode":  # the same bytes and times, a new file (a copy renamed over it)
        copy = root / "config.tmp"
        copy.write_bytes(path.read_bytes())
        os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
        copy.replace(path)
    else:
        entries = [{**e, "sha256": "0" * 64} if e["path"] == "sub/tokenizer.json" else e for e in entries]
        result = wv.verify(str(root), entries, str(cache), workers=2)
        assert (result.hashed_files, result.cached_files) == (1, 2)
        assert result.problems == ["sub/tokenizer.json: sha256 differs from the signed manifest"]
        return
    again = verified(root, entries, cache)
    assert (again.hashed_files, again.cached_files) == (1, 2)


def test_a_cache_others_can_write_is_not_trusted(tmp_path: Path) -> None:
    root = folder(tmp_path)
    entries = wv.describe(str(root))
    cache = tmp_path / "model.json"
    verified(root, entries, cache)
    cache.chmod(0o666)
    again = verified(root, entries, cache)
    assert (again.hashed_files, again.cached_files) == (3, 0)


def test_a_file_changed_just_before_the_verify_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wv, "_RACY_NS", 2_000_000_000)
    root = folder(tmp_path)
    entries = wv.describe(str(root))
    cache = tmp_path / "model.json"
    first = verified(root, entries, cache)
    assert first.hashed_files == 3
    assert not cache.exists() or json.loads(cache.read_text())["files"] == {}
    again = verified(root, entries, cache)
    assert again.hashed_files == 3


def test_bytes_changed_under_the_filesystem_pass_the_cache_until_a_full_verify_drops_them(tmp_path: Path) -> None:
    """What the cache cannot see (docs/weights.md): a change that moves no stat field, made here
    by writing the changed file's new key into the cache. A full verify finds it, and from then
    on the cache no longer vouches for it."""
    root = tmp_path / "one"  # one file: after the full verify no entry is left to write
    root.mkdir()
    (root / "config.json").write_text('{"architectures": ["X"]}')
    entries = wv.describe(str(root))
    cache = tmp_path / "model.json"
    verified(root, entries, cache)
    shard = root / "config.json"
    shard.write_text('{"architectures": ["Y"]}')
    data = json.loads(cache.read_text())
    data["files"]["config.json"]["key"] = wv.stat_key(shard.stat())
    cache.write_text(json.dumps(data))
    cache.chmod(0o600)
    assert wv.verify(str(root), entries, str(cache)).problems == []  # unseen: its key is the cached one
    full = wv.verify(str(root), entries, str(cache), full=True)
    assert full.problems == ["config.json: sha256 differs from the signed manifest"]
    again = wv.verify(str(root), entries, str(cache))
    assert again.problems == ["config.json: sha256 differs from the signed manifest"]
    assert (again.hashed_files, again.cached_files) == (1, 0)
