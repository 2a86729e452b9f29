"""The weights verifier as the hosts run it: the file itself, by the system's python3 (standard
library only), on a folder in a temp tree. It names a flipped byte, an extra file and a missing
one, and a second run over an unchanged folder hashes nothing (its counters say so)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from installer.weights import verify as weights_verify
from tests.support import REPO
from tests.support.weights_mirror import serve_folder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SCRIPT = REPO / "installer" / "weights" / "verify.py"
# the hosts' interpreter: no venv, so a third-party import would fail here too
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else (shutil.which("python3") or sys.executable)


def run(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([PYTHON, "-I", str(SCRIPT), *args], capture_output=True, text=True, check=False)
    assert proc.stderr == ""
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "weights"
    root.mkdir()
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    for i in range(3):
        (root / f"model-0000{i}.safetensors").write_bytes(os.urandom(300_000))
    code, listed = run("describe", "--root", str(root))
    assert code == 0
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(listed))
    return root, manifest, tmp_path / "cache" / "weights.json"


def verify(root: Path, manifest: Path, cache: Path, *extra: str) -> tuple[int, dict]:
    return run("verify", "--root", str(root), "--manifest", str(manifest), "--cache", str(cache), *extra)


def test_an_unchanged_folder_passes_and_a_second_run_hashes_nothing(model: tuple[Path, Path, Path]) -> None:
    root, manifest, cache = model
    # the verifier does not cache a file changed within 2 s of its start (docs/weights.md)
    time.sleep(2.1)
    code, first = verify(root, manifest, cache)
    assert (code, first["ok"], first["hashed_files"], first["cached_files"]) == (0, True, 4, 0)
    code, second = verify(root, manifest, cache)
    assert (code, second["hashed_files"], second["hashed_bytes"], second["cached_files"]) == (0, 0, 0, 4)
    code, full = verify(root, manifest, cache, "--full")
    assert (code, full["hashed_files"], full["cached_files"]) == (0, 4, 0)


def test_a_flipped_byte_with_its_mtime_restored_is_refused_naming_the_file(
    model: tuple[Path, Path, Path],
) -> None:
    root, manifest, cache = model
    time.sleep(2.1)
    assert verify(root, manifest, cache)[0] == 0
    shard = root / "model-00001.safetensors"
    st = shard.stat()
    with shard.open("r+b") as fh:
        fh.seek(123_456)
        byte = fh.read(1)
        fh.seek(123_456)
        fh.write(bytes([byte[0] ^ 1]))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # the edit hides its mtime; ctime moved
    code, out = verify(root, manifest, cache)
    assert code == 1
    assert out["problems"] == ["model-00001.safetensors: sha256 differs from the signed manifest"]
    assert out["hashed_files"] == 1


def test_an_extra_and_a_missing_file_are_refused_by_name(model: tuple[Path, Path, Path]) -> None:
    root, manifest, cache = model
    (root / "model-00002.safetensors").unlink()
    (root / "stray.safetensors").write_bytes(b"x")
    code, out = verify(root, manifest, cache)
    assert code == 1
    assert out["problems"] == [
        "model-00002.safetensors: missing (the signed manifest lists it)",
        "stray.safetensors: not in the signed manifest (an extra file)",
    ]


def test_a_manifest_path_out_of_the_folder_is_refused_before_reading(
    model: tuple[Path, Path, Path], tmp_path: Path,
) -> None:
    root, manifest, cache = model
    entry = json.loads(manifest.read_text())["files"][0]
    manifest.write_text(json.dumps({"files": [{**entry, "path": "../manifest.json"}]}))
    code, out = verify(root, manifest, cache)
    assert code == 2
    assert "../manifest.json: escapes the model folder" in out["problems"][0]


def test_the_module_is_the_file_the_roles_ship() -> None:
    assert Path(weights_verify.__file__).resolve() == SCRIPT.resolve()


def test_a_mirror_fills_the_folder_resumes_a_part_and_fetches_only_what_is_wrong(
    model: tuple[Path, Path, Path], tmp_path: Path,
) -> None:
    source, manifest, cache = model
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    token.chmod(0o600)
    root = tmp_path / "models" / "tiny"
    with serve_folder(source, tmp_path, "t0k3n") as mirror:
        def fetch(*extra: str) -> tuple[int, dict]:
            return run("fetch", "--root", str(root), "--manifest", str(manifest), "--cache", str(cache),
                       "--url", mirror.url, "--ca", str(mirror.ca_file), *extra)

        # an earlier run stopped after 1000 bytes of one file: it is resumed, not fetched again
        part = tmp_path / "models" / ".tiny.fetching" / "model-00000.safetensors"
        part.parent.mkdir(parents=True)
        part.write_bytes((source / "model-00000.safetensors").read_bytes()[:1000])
        code, out = fetch("--token-file", str(token))
        assert (code, out["problems"], out["fetched_files"]) == (0, [], 4), out
        assert out["fetched_bytes"] == sum(p.stat().st_size for p in source.iterdir()) - 1000
        assert ("/models/model-00000.safetensors", "bytes=1000-") in mirror.requests

        shard = root / "model-00001.safetensors"
        shard.write_bytes(b"\0" + shard.read_bytes()[1:])
        (root / "stray.bin").write_bytes(b"x")
        mirror.requests.clear()
        code, out = fetch("--token-file", str(token))
        assert (code, out["problems"], out["fetched_files"]) == (0, [], 1), out
        assert [p for p, _ in mirror.requests] == ["/models/model-00001.safetensors"]
        assert not (root / "stray.bin").exists()

        shard.write_bytes(b"\0" + shard.read_bytes()[1:])
        code, out = fetch()  # no token: the mirror refuses, and the error says so without a secret
        assert code == 2 and "401" in out["problems"][0]
