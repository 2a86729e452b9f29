"""Copy a bundle to every host in parallel, sending only what a host does not already hold.

The host compares what it has with the manifest (`sha256sum -c`), we stream the missing or
damaged files as one tar over the system ssh client (fast, and the same host-key checking as
everywhere), then the host verifies the whole bundle again. An interrupted push therefore
resumes: complete files are kept, a half-written one fails its checksum and is sent again.
"""

import shlex
import subprocess
import tarfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from installer.bundle.manifest import CHECKSUMS, MANIFEST, Manifest
from installer.errors import BundleError
from installer.ssh import Target

HOST_BUNDLES = "/var/lib/private-llm/bundles"

# (host name, bytes sent so far, bytes to send)
PushProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PushResult:
    host: str
    sent_files: int
    sent_bytes: int
    skipped_files: int


def host_dir(man: Manifest) -> str:
    return f"{HOST_BUNDLES}/{man.bundle_id[:24]}"


def _ssh(target: Target, command: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(target.ssh_argv(command), input=stdin, capture_output=True, check=False)


def _missing(target: Target, dest: str, man: Manifest) -> list[str]:
    """Paths the host lacks or holds with the wrong content."""
    script = (
        f"mkdir -p {shlex.quote(dest)} && cd {shlex.quote(dest)} && "
        "sha256sum --strict -c - 2>/dev/null | sed -n 's/: FAILED.*$//p'; true"
    )
    proc = _ssh(target, script, man.checksums_text().encode())
    if proc.returncode != 0:
        raise BundleError(f"{target.name}: cannot check the bundle there: {proc.stderr.decode().strip()}")
    bad = {line for line in proc.stdout.decode().splitlines() if line}
    return [f.path for f in man.files if f.path in bad]


class _CountingWriter:
    def __init__(self, raw, on_bytes: Callable[[int], None]) -> None:
        self._raw, self._on_bytes = raw, on_bytes

    def write(self, data: bytes) -> int:
        self._raw.write(data)
        self._on_bytes(len(data))
        return len(data)


def _send(target: Target, root: Path, dest: str, paths: list[str], on_bytes: Callable[[int], None]) -> None:
    cmd = f"tar -xf - -C {shlex.quote(dest)}"
    proc = subprocess.Popen(target.ssh_argv(cmd), stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        with tarfile.open(fileobj=_CountingWriter(proc.stdin, on_bytes), mode="w|", bufsize=1 << 20) as tar:
            for rel in paths:
                tar.add(root / rel, arcname=rel, recursive=False)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    if proc.wait() != 0:
        err = proc.stderr.read().decode().strip() if proc.stderr else ""
        raise BundleError(f"{target.name}: copying the bundle failed: {err}")


def push_one(target: Target, root: Path, man: Manifest, progress: PushProgress) -> PushResult:
    dest = host_dir(man)
    missing = _missing(target, dest, man)
    sizes = {f.path: f.size for f in man.files}
    total = sum(sizes[p] for p in missing)
    sent = 0
    lock = threading.Lock()

    def on_bytes(n: int) -> None:
        nonlocal sent
        with lock:
            sent += n
        progress(target.name, min(sent, total), total)

    progress(target.name, 0, total)
    if missing:
        _send(target, root, dest, missing, on_bytes)
    # The manifest and checksum list travel last: a host with them holds a complete bundle.
    _send(target, root, dest, [MANIFEST, CHECKSUMS], lambda _n: None)
    if missing:
        # When nothing was sent, the check above already verified every file on the host.
        check = _ssh(target, f"cd {shlex.quote(dest)} && sha256sum --quiet --strict -c {CHECKSUMS}")
        if check.returncode != 0:
            bad = check.stdout.decode().strip().splitlines()[:5]
            raise BundleError(f"{target.name}: the bundle failed verification after the copy", bad)
    progress(target.name, total, total)
    return PushResult(target.name, len(missing), total, len(man.files) - len(missing))


def push(targets: list[Target], root: Path, man: Manifest, progress: PushProgress) -> list[PushResult]:
    """Push to all hosts at once; raise BundleError listing every host that failed."""
    results: list[PushResult] = []
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(targets)))) as pool:
        futures = {pool.submit(push_one, t, root, man, progress): t for t in targets}
        for fut, t in futures.items():
            try:
                results.append(fut.result())
            except BundleError as exc:
                errors.append(f"{t.name}: {exc}")
    if errors:
        raise BundleError(f"the bundle could not be pushed to {len(errors)} host(s)", errors)
    return results
