"""Runs ON A HOST (standard library only) and on the control machine: the weights of one model
folder against the signed list of its files (path, size, sha256 and, for a file larger than
CHUNK, the sha256 of each CHUNK-sized piece), hashed on every core.

Why pieces: one file's sha256 is sequential, so a 40 GB checkpoint of eight 5 GB shards would
keep eight cores busy on a sixteen-core host. Each piece's sha256 is signed in the manifest as
the whole file's is, so checking every piece proves the same bytes; the host checks pieces, and
the whole-file sha256 stays in the list for `sha256sum -c` and for folders hashed elsewhere.
Threads suffice: hashlib and os.pread release the GIL (docs/weights.md has the figures).

The cache (one JSON file per folder, root's, 0600) keeps, per file, the stat key
(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) it had when it was last found equal to a
manifest entry, and that entry's digest. A file whose key and entry are unchanged is not read
again, so a converged `up` re-hashes nothing; `--full` ignores the cache. What the cache cannot
see is in docs/weights.md.

Commands (one JSON line out; exit 0 when the folder matches, 1 when it does not, 2 on bad use):
  describe --root DIR                  the list of DIR's files, for a bundle build or an operator
  verify --root DIR --manifest FILE [--folder F | --prefix P] [--cache FILE] [--full] [--workers N]
  fetch  --root DIR --manifest FILE [--folder F | --prefix P] --url URL [--url URL2 ...] [--ca PEM]
         [--token-file F] [--cert PEM --key PEM] [--wait-s S] [--progress FILE] [--cache FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # fetch imports them when it runs: verify, on every host, needs neither
    import ssl
    import urllib.request

CHUNK = 256 << 20  # one piece of a large file: 1,400 signed hashes for 700 GB; about 1 s of one core
_READ = 8 << 20
# A file changed this close to the verify's start may change again within the same ctime tick
# (the kernel's coarse clock) after it was hashed, unseen by its key: it is checked, not cached.
_RACY_NS = 2_000_000_000
CACHE_FORMAT = 1


def check_path(path: str) -> str:
    """A manifest path must stay inside the model folder: relative, no '..', no '.' parts."""
    if not isinstance(path, str) or not path or "\0" in path or "\\" in path:
        raise ValueError(f"{path!r}: not a file path")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path}: escapes the model folder (a path must be relative, without '.', '..' or '//')")
    return path


def check_entries(entries: object) -> list[dict]:
    """The manifest's list of files, each with path, size, sha256 and (large files) chunks."""
    if not isinstance(entries, list):
        raise ValueError("the list of weight files is not a list")
    seen: set[str] = set()
    for e in entries:
        if not isinstance(e, dict) or set(e) - {"path", "size", "sha256", "chunks"}:
            raise ValueError(f"{e!r}: an entry has path, size, sha256 and chunks only")
        path = check_path(e.get("path"))  # type: ignore[arg-type]
        if path in seen or any(s.startswith(path + "/") or path.startswith(s + "/") for s in seen):
            raise ValueError(f"{path}: listed twice, or both a file and a folder")
        seen.add(path)
        size, digest, chunks = e.get("size"), e.get("sha256"), e.get("chunks")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"{path}: size {size!r} is not a byte count")
        if not _is_sha256(digest):
            raise ValueError(f"{path}: sha256 {digest!r} is not 64 hex digits")
        if chunks is not None:
            count = -(-size // CHUNK)
            if not isinstance(chunks, list) or len(chunks) != count or not all(map(_is_sha256, chunks)):
                raise ValueError(f"{path}: chunks must be {count} sha256 of {CHUNK} bytes each")
    return entries  # type: ignore[return-value]


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def entry_digest(entry: dict) -> str:
    """What a cache entry was verified against: a new manifest entry for the path misses."""
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


@dataclass
class Result:
    problems: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # listed files missing or not as listed
    extra: list[str] = field(default_factory=list)  # files the list does not have
    fetched_files: int = 0
    fetched_bytes: int = 0
    hashed_files: int = 0
    hashed_bytes: int = 0
    cached_files: int = 0
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps({
            "ok": not self.problems, "problems": self.problems, "hashed_files": self.hashed_files,
            "hashed_bytes": self.hashed_bytes, "cached_files": self.cached_files,
            "fetched_files": self.fetched_files, "fetched_bytes": self.fetched_bytes,
            "seconds": round(self.seconds, 3),
        }, sort_keys=True)


def scan(root: str) -> tuple[dict[str, os.stat_result], list[str]]:
    """Every file under root by relative path (a link inside the folder to a file inside it is
    read through), and the problems: a link out of the folder, a special file."""
    real_root = os.path.realpath(root)
    found: dict[str, os.stat_result] = {}
    problems: list[str] = []
    for top, dirs, files in os.walk(real_root):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(top, name)
            rel = os.path.relpath(full, real_root).replace(os.sep, "/")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(full)
                if os.path.commonpath([real_root, target]) != real_root:
                    problems.append(f"{rel}: a symlink to {target}, outside the model folder {real_root}")
                    continue
                if os.path.isdir(target):
                    problems.append(f"{rel}: a symlink to a folder (list its files instead)")
                    continue
                st = os.stat(full)
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                problems.append(f"{rel}: not a regular file")
                continue
            found[rel] = st
    return found, problems


@dataclass(frozen=True)
class _Piece:
    path: str  # relative
    offset: int
    length: int
    sha256: str  # expected


def _hash_range(full: str, offset: int, length: int) -> str:
    """The sha256 of `length` bytes at `offset`; "" when the file cannot be read (gone since
    the scan), which matches no expected digest."""
    digest = hashlib.sha256()
    try:
        fd = os.open(full, os.O_RDONLY)
    except OSError:
        return ""
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_SEQUENTIAL)
        end = offset + length
        while offset < end:
            block = os.pread(fd, min(_READ, end - offset), offset)
            if not block:
                break  # the file shrank under us: the digest will not match
            digest.update(block)
            offset += len(block)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _pieces(entry: dict) -> list[_Piece]:
    chunks = entry.get("chunks")
    if not chunks:
        return [_Piece(entry["path"], 0, entry["size"], entry["sha256"])]
    size = entry["size"]
    return [
        _Piece(entry["path"], i * CHUNK, min(CHUNK, size - i * CHUNK), h) for i, h in enumerate(chunks)
    ]


def workers_default() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_cache(path: str | None) -> dict[str, dict]:
    """The cache's entries, or none when it is absent, unreadable, or writable by anyone but
    its owner, this process's user (a cache others could write could vouch for any bytes)."""
    if not path:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return {}
        try:
            data = json.load(fh)
        except ValueError:
            return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def save_cache(path: str, files: dict[str, dict]) -> None:
    """Atomically, 0600: a crash leaves the old cache or the new one, never half of one."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".weights-cache-")
    try:
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o600)
            json.dump({"format": CACHE_FORMAT, "files": files}, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def verify(
    root: str, entries: list[dict], cache_path: str | None = None, full: bool = False,
    workers: int | None = None,
) -> Result:
    """Compare the folder with the manifest: every listed file present with its size and bytes,
    nothing else. The cache is read unless `full`, and written with every file found equal."""
    start, started_ns = time.monotonic(), time.time_ns()
    entries = check_entries(entries)
    result = Result()
    if not os.path.isdir(root):
        result.problems.append(f"{root}: the model folder is missing")
        return result
    present, result.problems = scan(root)
    listed = {e["path"]: e for e in entries}
    cache = {} if full else load_cache(cache_path)
    new_cache: dict[str, dict] = {}
    todo: list[dict] = []
    for path, entry in sorted(listed.items()):
        st = present.get(path)
        if st is None:
            result.problems.append(f"{path}: missing (the signed manifest lists it)")
            result.wrong.append(path)
            continue
        if st.st_size != entry["size"]:
            result.problems.append(f"{path}: {st.st_size} bytes, the signed manifest says {entry['size']}")
            result.wrong.append(path)
            continue
        hit = cache.get(path)
        if hit and hit.get("key") == stat_key(st) and hit.get("entry") == entry_digest(entry):
            result.cached_files += 1
            new_cache[path] = hit
        else:
            todo.append(entry)
    result.extra = sorted(set(present) - set(listed))
    result.problems += [f"{p}: not in the signed manifest (an extra file)" for p in result.extra]
    real_root = os.path.realpath(root)
    pieces = [p for e in sorted(todo, key=lambda e: -e["size"]) for p in _pieces(e)]
    bad: dict[str, list[str]] = {}
    with ThreadPoolExecutor(max_workers=workers or workers_default()) as pool:
        digests = pool.map(lambda p: _hash_range(os.path.join(real_root, p.path), p.offset, p.length), pieces)
        for piece, got in zip(pieces, digests, strict=True):
            result.hashed_bytes += piece.length
            if got != piece.sha256:
                whole = piece.length == listed[piece.path]["size"]
                where = "" if whole else f" (bytes {piece.offset}-{piece.offset + piece.length - 1})"
                bad.setdefault(piece.path, []).append(where)
    for entry in todo:
        path = entry["path"]
        result.hashed_files += 1
        if path in bad:
            result.problems.append(f"{path}: sha256 differs from the signed manifest{bad[path][0]}")
            result.wrong.append(path)
            continue
        before = present[path]
        try:
            after = os.stat(os.path.join(real_root, path))
        except OSError:
            after = None
        if after is None or stat_key(after) != stat_key(before):
            result.problems.append(f"{path}: changed while it was being verified (run again)")
            result.wrong.append(path)
        elif max(after.st_mtime_ns, after.st_ctime_ns) < started_ns - _RACY_NS:
            new_cache[path] = {"key": stat_key(after), "entry": entry_digest(entry)}
    # A full verify always writes: it drops the entry of a file found wrong whose key did not
    # move (bytes changed under the filesystem), which would otherwise vouch for it next time.
    if cache_path and (full or new_cache != cache):
        save_cache(cache_path, new_cache)
    result.seconds = time.monotonic() - start
    return result


def _mirror_opener(context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """urllib with the deployment's trust, following a mirror's redirects without leaking its
    token: urllib copies every header, Authorization too, to wherever a redirect points (another
    host, or plain http). Here a redirect off TLS is refused, and one to another host goes there
    without the token (an object store's signed URL needs none, and S3 refuses two kinds of
    authentication at once)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    class Redirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
            to, was = urllib.parse.urlsplit(newurl), urllib.parse.urlsplit(req.full_url)
            if to.scheme != "https":
                raise urllib.error.HTTPError(
                    req.full_url, code, f"the mirror redirects off TLS ({to.scheme}://{to.hostname}): refused",
                    headers, fp)
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            if new is not None and (to.hostname, to.port) != (was.hostname, was.port):
                new.remove_header("Authorization")
            return new

    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), Redirects())


def _readable(root: str) -> None:
    """The fetched tree readable by the engine's user whatever root's umask (a hardened host's
    027 or 077 would leave the files root's alone, verified and unreadable to the engine)."""
    def mode(path: str, want: int) -> None:
        if stat.S_IMODE(os.lstat(path).st_mode) != want:  # a chmod changes ctime: the cache re-hashes
            os.chmod(path, want)

    for here, _dirs, files in os.walk(root):
        mode(here, 0o755)
        for name in files:
            mode(os.path.join(here, name), 0o644)


def _origin(url: str) -> str:
    """scheme://host:port of a source, for a message (a path could name more than needed)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


class _Progress:
    """Bytes fetched so far and the source last used, rewritten at most twice a second."""

    def __init__(self, path: str | None, total: int) -> None:
        import threading

        self.path, self.total, self.done, self.source = path, total, 0, ""
        self._lock, self._at = threading.Lock(), 0.0

    def add(self, n: int, source: str) -> None:
        with self._lock:
            self.done, self.source = self.done + n, _origin(source)
            if not self.path or time.monotonic() - self._at < 0.5:
                return
            self._at = time.monotonic()
        self.write()

    def write(self) -> None:
        if not self.path:
            return
        with self._lock:
            data = {"bytes": self.done, "total": self.total, "source": self.source, "at": time.time()}
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path) or ".", prefix=".fetch-progress-")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True)
        os.replace(tmp, self.path)


def fetch(
    root: str, entries: list[dict], url: str | list[str], ca_file: str | None = None,
    token_file: str | None = None, cache_path: str | None = None, workers: int | None = None,
    cert: tuple[str, str] | None = None, wait_s: float = 0.0, progress_path: str | None = None,
) -> Result:
    """Make `root` (a folder the installer owns) hold exactly the listed files, from a mirror or
    from the hosts of a fan-out: what the cache and hashes find wrong or missing is fetched from
    `url` + path over TLS (the system's trust store and `ca_file`, and the client certificate
    `cert` where the source requires one), a bearer token read from `token_file` (never logged),
    a part already fetched resumed with a Range request; files the list lacks are removed. Then
    the folder is verified again, so nothing fetched is trusted unhashed.

    Several URLs are sources in order of preference (a fan-out's parent first). A source that
    answers 503 has not got the file yet: it is asked again each second for up to `wait_s`.
    Any other failure (refused, reset mid-file, timed out, 409 for bytes it found wrong) moves
    to the next source, resuming the part where the last one stopped, so a host that dies
    mid-transfer stalls no one. `progress_path` is rewritten with the bytes fetched and the
    source in use, for the fan-out's display."""
    import http.client
    import ssl
    import urllib.error
    import urllib.parse
    import urllib.request

    sources = [url] if isinstance(url, str) else list(url)
    if not sources:
        raise ValueError("fetch needs at least one source URL")

    os.makedirs(root, mode=0o755, exist_ok=True)
    first = verify(root, entries, cache_path, workers=workers)
    if not first.wrong and not first.extra:
        return first
    real_root = os.path.realpath(root)
    for path in first.extra:
        os.unlink(os.path.join(real_root, path))
    staging = os.path.join(os.path.dirname(real_root), "." + os.path.basename(real_root) + ".fetching")
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    if cert:
        context.load_cert_chain(*cert)
    headers = {}
    if token_file:
        with open(token_file) as fh:
            headers["Authorization"] = "Bearer " + fh.read().strip()
    listed = {e["path"]: e for e in entries}
    opener = _mirror_opener(context)

    progress = _Progress(progress_path, sum(listed[p]["size"] for p in first.wrong))

    def from_source(path: str, source: str) -> None:
        part = os.path.join(staging, path)
        os.makedirs(os.path.dirname(part), mode=0o700, exist_ok=True)
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if have >= listed[path]["size"]:
            have = 0  # a whole or longer part from an earlier run is fetched again, not trusted
        request = urllib.request.Request(source + urllib.parse.quote(path), headers=dict(headers))
        if have:
            request.add_header("Range", f"bytes={have}-")
        with opener.open(request, timeout=30) as answer:
            append = have and answer.status == 206
            with open(part, "ab" if append else "wb") as out:
                try:
                    while block := answer.read(_READ):
                        out.write(block)
                        progress.add(len(block), source)
                except http.client.HTTPException as exc:  # cut mid-body: not an OSError
                    raise ConnectionError(f"{path}: the source stopped mid-file ({exc!r})") from exc
        if os.path.getsize(part) != listed[path]["size"]:  # the source closed early: try the next
            raise ConnectionError(f"{path}: the source stopped before the end of the file")
        os.makedirs(os.path.dirname(os.path.join(real_root, path)), exist_ok=True)
        os.replace(part, os.path.join(real_root, path))

    def one(path: str) -> None:
        failures: list[OSError] = []
        for source in sources:
            waited_until = time.monotonic() + wait_s
            while True:
                try:
                    from_source(path, source)
                    return
                except urllib.error.HTTPError as exc:
                    if exc.code == 503 and time.monotonic() < waited_until:
                        time.sleep(1.0)  # the source has not got this file yet
                        continue
                    failures.append(exc)
                except OSError as exc:  # refused, reset, timed out: this source is gone
                    failures.append(exc)
                break
        if len(sources) == 1:
            raise failures[-1]
        raise OSError(f"{path}: every source failed: " + "; ".join(
            f"{_origin(s)}: {f}" for s, f in zip(sources, failures, strict=True)))

    with ThreadPoolExecutor(max_workers=min(8, workers or workers_default())) as pool:
        list(pool.map(one, first.wrong))
    progress.write()
    _readable(real_root)
    result = verify(root, entries, cache_path, workers=workers)
    if not result.wrong and not result.extra:
        shutil.rmtree(staging, ignore_errors=True)  # parts are kept only to resume a failed fetch
    result.fetched_files, result.fetched_bytes = len(first.wrong), progress.done
    return result


def describe(root: str, workers: int | None = None) -> list[dict]:
    """Every file of a folder as a manifest entry (sha256 of the whole file, and of each CHUNK
    of a larger one, from one read). Refuses a folder with a link out of it or a special file."""
    present, problems = scan(root)
    if problems:
        raise ValueError("; ".join(problems))
    real_root = os.path.realpath(root)

    def one(path: str) -> dict:
        whole = hashlib.sha256()
        chunks: list[str] = []
        piece = hashlib.sha256()
        in_piece = 0
        with open(os.path.join(real_root, path), "rb", buffering=0) as fh:
            while block := fh.read(_READ):
                whole.update(block)
                while block:
                    take = block[: CHUNK - in_piece]
                    piece.update(take)
                    in_piece += len(take)
                    block = block[len(take):]
                    if in_piece == CHUNK:
                        chunks.append(piece.hexdigest())
                        piece, in_piece = hashlib.sha256(), 0
        size = present[path].st_size
        entry: dict = {"path": path, "size": size, "sha256": whole.hexdigest()}
        if size > CHUNK:
            if in_piece:
                chunks.append(piece.hexdigest())
            entry["chunks"] = chunks
        return entry

    with ThreadPoolExecutor(max_workers=workers or workers_default()) as pool:
        return list(pool.map(one, sorted(present)))


def _listed(manifest: str, folder: str | None, prefix: str | None = None) -> list[dict]:
    """The files to check: a list's, a bundle manifest's folder by reference (`folder`), or a
    bundle manifest's own files under `prefix` (a folder the bundle carries), made relative."""
    with open(manifest) as fh:
        data = json.load(fh)
    if prefix is not None:
        return check_entries([
            {**e, "path": e["path"][len(prefix):]} for e in data.get("files", []) if e["path"].startswith(prefix)
        ])
    if folder is None:
        return check_entries(data.get("files"))
    found = data.get("components", {}).get("weights_by_reference", {}).get(folder)
    if not isinstance(found, dict):
        raise ValueError(f"{manifest} lists no weights by reference for {folder}")
    return check_entries(found.get("files"))


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="verify.py")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("describe")
    d.add_argument("--root", required=True)
    d.add_argument("--workers", type=int)
    for name in ("verify", "fetch"):
        v = sub.add_parser(name)
        v.add_argument("--root", required=True)
        v.add_argument("--manifest", required=True, help="JSON: {\"files\": [entries]}, or a bundle's manifest.json")
        v.add_argument("--folder", help="with a bundle's manifest.json: the folder's list in weights_by_reference")
        v.add_argument("--prefix", help="with a bundle's manifest.json: its files under this folder (model/)")
        v.add_argument("--cache")
        v.add_argument("--workers", type=int)
    sub.choices["verify"].add_argument("--full", action="store_true", help="hash every file, ignoring the cache")
    sub.choices["fetch"].add_argument("--url", required=True, action="append",
                                      help="a source; several are tried in order (a fan-out's parent first)")
    sub.choices["fetch"].add_argument("--ca")
    sub.choices["fetch"].add_argument("--token-file")
    sub.choices["fetch"].add_argument("--cert", help="client certificate (PEM) for a source that requires one")
    sub.choices["fetch"].add_argument("--key", help="its key (PEM)")
    sub.choices["fetch"].add_argument("--wait-s", type=float, default=0.0,
                                      help="how long a source that has not got a file yet (503) is waited for")
    sub.choices["fetch"].add_argument("--progress", help="a JSON file rewritten with the bytes fetched")
    args = parser.parse_args(argv)
    try:
        if args.command == "describe":
            print(json.dumps({"files": describe(args.root, args.workers)}, sort_keys=True))
            return 0
        files = _listed(args.manifest, args.folder, args.prefix)
        if args.command == "fetch":
            cert = (args.cert, args.key) if args.cert else None
            result = fetch(args.root, files, args.url, args.ca, args.token_file, args.cache, args.workers,
                           cert, args.wait_s, args.progress)
        else:
            result = verify(args.root, files, args.cache, args.full, args.workers)
    except (OSError, ValueError) as exc:  # URLError is an OSError; a bad list a ValueError
        print(json.dumps({"ok": False, "problems": [str(exc)], "error": True}))
        return 2
    print(result.to_json())
    return 0 if not result.problems else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
