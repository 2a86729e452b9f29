"""Pushing a bundle: only what a host lacks travels, an interrupted push resumes, all is checked.

The "host" is a directory on this machine reached through `sh -c` instead of ssh: the same
host-side shell, coreutils and tar run on it, so the protocol is exercised for real.
"""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle import push
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, Manifest
from installer.hosts.ssh import Target
from tests.support.bundles import make_bundle


class LocalHost(Target):
    """A Target whose commands run here; `mangle` runs the copy's tar stream through a filter."""

    mangle: str = ""

    def ssh_argv(self, command: str | None = None) -> list[str]:
        assert command is not None
        if self.mangle and command.startswith("tar -xf"):
            command = f"{self.mangle} | {command}"
        # bash -c runs a single command by exec: killing this PID kills the copy itself, as
        # killing the ssh client does for a real host.
        return ["bash", "-c", command]


def host(name: str = "h1") -> LocalHost:
    return LocalHost(name, "127.0.0.1", "root", 22, None, None)


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, Manifest]:
    root = tmp_path / "bundle"
    files = {
        "model/model-00001.safetensors": os.urandom(24 << 20),
        "model/config.json": b'{"hidden_size": 64}',
        "wheels/demo-1.0-py3-none-any.whl": os.urandom(3 << 20),
        "tools/uv": b"#!/bin/sh\n",
        "playbooks/site.yml": b"---\n",
    }
    return root, make_bundle(root, None, files)


def _no_progress(_host: str, _sent: int, _total: int) -> None:
    pass


def _held_bytes(dest: Path, man: Manifest) -> int:
    return sum((dest / f.path).stat().st_size for f in man.files if (dest / f.path).is_file())


def test_first_push_sends_everything_and_the_next_nothing(bundle, tmp_path: Path) -> None:
    root, man = bundle
    dest = tmp_path / "host" / "b1"
    seen: list[tuple[int, int]] = []
    first = push.push_one(host(), root, man, lambda _h, s, t: seen.append((s, t)), str(dest))
    assert first.sent_files == len(man.files) and first.skipped_files == 0
    assert first.sent_bytes >= man.total_size
    assert seen[-1][0] == seen[-1][1] == first.sent_bytes  # progress ends at 100 %
    assert first.rate > 0
    for name in (MANIFEST, CHECKSUMS):
        assert (dest / name).read_bytes() == (root / name).read_bytes()
    ok = subprocess.run(["sha256sum", "--quiet", "-c", CHECKSUMS], cwd=dest, check=False)
    assert ok.returncode == 0

    second = push.push_one(host(), root, man, _no_progress, str(dest))
    assert (second.sent_files, second.sent_bytes, second.skipped_files) == (0, 0, len(man.files))


def test_interrupted_push_resumes_and_sends_only_the_rest(
    bundle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, man = bundle
    dest = tmp_path / "host" / "b1"
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(push.subprocess, "Popen", recording_popen)
    killed = []

    def kill_midway(_host: str, sent: int, _total: int) -> None:
        if sent > 10 << 20 and not killed:  # inside the 24 MB weights file
            os.kill(started[-1].pid, signal.SIGKILL)
            killed.append(sent)

    with pytest.raises(BundleError, match="copying the bundle failed"):
        push.push_one(host(), root, man, kill_midway, str(dest))
    assert killed
    monkeypatch.setattr(push.subprocess, "Popen", real_popen)

    held = _held_bytes(dest, man)
    partial = dest / "model/model-00001.safetensors"
    assert 0 < partial.stat().st_size < 24 << 20, "the kill should leave a partial file"
    assert not (dest / MANIFEST).exists()  # not a complete bundle

    again = push.push_one(host(), root, man, _no_progress, str(dest))
    assert again.resumed_files == 1
    meta = sum((root / m).stat().st_size for m in (MANIFEST, CHECKSUMS))
    # Exactly what was missing: the interrupted file's tail, the files after it, the meta files.
    assert again.sent_bytes == man.total_size - held + meta
    assert again.sent_bytes < man.total_size
    assert partial.read_bytes() == (root / "model/model-00001.safetensors").read_bytes()


def test_a_damaged_file_on_the_host_is_sent_again_whole(bundle, tmp_path: Path) -> None:
    root, man = bundle
    dest = tmp_path / "host" / "b1"
    push.push_one(host(), root, man, _no_progress, str(dest))
    target = dest / "wheels/demo-1.0-py3-none-any.whl"
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.write_bytes(bytes(data))
    again = push.push_one(host(), root, man, _no_progress, str(dest))
    assert (again.sent_files, again.resumed_files) == (1, 0)
    assert again.sent_bytes == 3 << 20
    assert target.read_bytes() == (root / "wheels/demo-1.0-py3-none-any.whl").read_bytes()


def test_a_longer_or_different_partial_file_is_not_resumed(bundle, tmp_path: Path) -> None:
    root, man = bundle
    dest = tmp_path / "host" / "b1"
    push.push_one(host(), root, man, _no_progress, str(dest))
    weights = dest / "model/model-00001.safetensors"
    weights.write_bytes(b"x" * 1000)  # same length as nothing we sent: a wrong beginning
    again = push.push_one(host(), root, man, _no_progress, str(dest))
    assert again.resumed_files == 0 and again.sent_bytes == 24 << 20


def test_upgrade_links_what_an_earlier_bundle_holds_and_sends_the_rest(
    bundle, tmp_path: Path
) -> None:
    root, man = bundle
    old_dest = tmp_path / "host" / "old"
    push.push_one(host(), root, man, _no_progress, str(old_dest))
    (root / "playbooks/site.yml").write_bytes(b"---\n# changed\n")
    new = make_bundle(root, None, {"playbooks/site.yml": b"---\n# changed\n"})
    assert new.bundle_id != man.bundle_id and new.release_id == man.release_id

    up = push.push_one(host(), root, new, _no_progress, str(tmp_path / "host" / "new"))
    assert up.linked_files == len(new.files) - 1
    assert up.sent_files == 1
    assert up.sent_bytes < 100 + sum((root / m).stat().st_size for m in (MANIFEST, CHECKSUMS))
    assert (tmp_path / "host/new/model/model-00001.safetensors").stat().st_nlink == 2
    # The old bundle is untouched by the new one.
    assert (old_dest / "playbooks/site.yml").read_bytes() == b"---\n"


def test_a_file_shared_with_another_bundle_is_never_written_through(bundle, tmp_path: Path) -> None:
    root, man = bundle
    a, b = tmp_path / "host" / "a", tmp_path / "host" / "b"
    push.push_one(host(), root, man, _no_progress, str(a))
    push.push_one(host(), root, man, _no_progress, str(b))
    shared = b / "model/model-00001.safetensors"
    assert shared.stat().st_nlink == 2
    os.truncate(shared, 1 << 20)  # a true beginning, but both bundles' copy
    again = push.push_one(host(), root, man, _no_progress, str(b))
    # Both directories were damaged through the shared inode; b is repaired by replacing its
    # name (no append through the link), and a is left for its own next push.
    assert again.resumed_files == 0
    assert shared.read_bytes() == (root / "model/model-00001.safetensors").read_bytes()
    assert (a / "model/model-00001.safetensors").stat().st_size == 1 << 20


def test_a_copy_damaged_on_the_way_is_caught_by_the_check_on_the_host(
    bundle, tmp_path: Path
) -> None:
    root, man = bundle
    # Flip byte 600000 of the payload stream (inside file data, past the headers); the short
    # stream of meta files passes unchanged.
    flipper = (
        'python3 -c "import sys;d=bytearray(sys.stdin.buffer.read());n=600000\n'
        'if len(d)>n: d[n]^=1\nsys.stdout.buffer.write(d)"'
    )
    bad_host = LocalHost("h1", "127.0.0.1", "root", 22, None, None)
    object.__setattr__(bad_host, "mangle", flipper)
    with pytest.raises(BundleError, match="failed verification after the copy"):
        push.push_one(bad_host, root, man, _no_progress, str(tmp_path / "host" / "b1"))


def test_the_signature_travels_and_is_checked_like_every_file(tmp_path: Path) -> None:
    from installer.bundle import sign

    pair = sign.keygen(tmp_path / "keys")
    root = tmp_path / "bundle"
    man = make_bundle(root, pair.private_key)
    dest = tmp_path / "host" / "b1"
    push.push_one(host(), root, man, _no_progress, str(dest))
    assert (dest / SIGNATURE).read_bytes() == (root / SIGNATURE).read_bytes()
    (dest / SIGNATURE).write_text("forged\n")
    again = push.push_one(host(), root, man, _no_progress, str(dest))
    assert again.sent_files == 0  # no payload file changed...
    assert (dest / SIGNATURE).read_bytes() == (
        root / SIGNATURE
    ).read_bytes()  # ...but it is repaired


def test_push_reports_every_failed_host(bundle, tmp_path: Path) -> None:
    root, man = bundle

    class Unreachable(LocalHost):
        def ssh_argv(self, command: str | None = None) -> list[str]:
            return ["sh", "-c", "echo 'ssh: connect to host: No route to host' >&2; exit 255"]

    with pytest.raises(BundleError, match="could not be pushed to 2 host") as err:
        push.push(
            [
                Unreachable("a", "x", "root", 22, None, None),
                Unreachable("b", "x", "root", 22, None, None),
            ],
            root,
            man,
            _no_progress,
        )
    assert all("No route to host" in line for line in err.value.details)
