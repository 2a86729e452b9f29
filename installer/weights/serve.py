"""Runs ON A HOST (standard library only), and on the control machine as the fan-out's root:
serves a model folder's signed files to the next hosts of a weights fan-out (docs/weights.md,
"Fan-out"), for `verify.py fetch --url` to fetch with Range resume.

Only deployment hosts pass: the TLS handshake requires a client certificate of the deployment
CA (every host's certificate carries clientAuth, installer/tls/ca.py), and each request must
carry this run's bearer token, read from a 0600 file and compared in constant time. Anyone
else gets a failed handshake or a 401 and no byte.

Nothing unverified is served onward. A file is served only once it has the size the signed
list gives and its pieces' sha256 match (hashed here on first request, or vouched for by the
verifier's cache with the same stat key); until then the answer is 503 with Retry-After, which
the fetcher takes as "not here yet" and waits, so a host serves each file as soon as it has it
(the fan-out pipelines by file). A file whose bytes are wrong gets 409: the fetcher moves to its
next source.

The server exits at its deadline (`--deadline-s`) whatever happens: the systemd unit or the
process that starts it needs no stop to be safe. `--stats` is rewritten (atomically) with the
bytes served to each client: the fan-out's progress and its control-link count read it.

  serve.py --root DIR --manifest FILE [--folder F | --prefix P | --under P ...] [--cache FILE]
           --bind ADDR --port N --cert PEM --key PEM --ca PEM --token-file F
           --deadline-s S [--stats FILE] [--limit-mb-s R] [--every-address]
           [--max-connections N] [--max-handshakes N] [--handshake-s S]
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import select
import socket
import socketserver
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if __package__:
    from installer.weights import verify as _verify
else:  # on the hosts: verify.py sits beside this file (the model role copies both)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import verify as _verify  # type: ignore[no-redef]

# The port the product runs it on, on each host of a fan-out, while `up` runs it (--port; fixed,
# not an inventory setting). Here, at the bottom of the layers, so that the inventory's checks can
# refuse another service on it (installer/inventory/fanout_ports.py) and weights/fanout.py use it.
PORT = 8471
_BLOCK = 1 << 20
_STATS_EVERY = 0.5  # seconds between two writes of the stats file


def read_token(path: str) -> str:
    """The run's token: a file only its owner can read (a token others can read is refused)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as fh:
        if os.fstat(fh.fileno()).st_mode & 0o077:
            raise ValueError(f"{path}: the fan-out token file must be mode 0600 (others can read it)")
        token = fh.read().strip()
    if len(token) < 32:
        raise ValueError(f"{path}: the fan-out token is shorter than 32 characters")
    return token


class Served:
    """The folder's files as the signed list gives them, each verified here before it is served."""

    def __init__(self, root: str, entries: list[dict], cache_path: str | None = None) -> None:
        self.root = os.path.realpath(root)
        self.listed = {e["path"]: e for e in _verify.check_entries(entries)}
        self.cache = _verify.load_cache(cache_path)
        self._checked: dict[str, list[int]] = {}  # path -> stat key it was found good with
        self._lock = threading.Lock()
        self._hashing: dict[str, threading.Lock] = {}
        self._next_slot = 0.0
        self.sent: dict[str, int] = {}  # client address -> bytes served
        self._stats_at = 0.0

    def state(self, path: str) -> tuple[int, str]:
        """(HTTP status, why): 200 when the file is here and verified, 404 when the list lacks
        it, 503 when it is not here (yet), 409 when its bytes differ from the list."""
        entry = self.listed.get(path)
        if entry is None:
            return 404, "not in the signed manifest"
        full = os.path.join(self.root, path)
        try:
            st = os.stat(full)
        except OSError:
            return 503, "not here yet"
        if st.st_size != entry["size"]:
            return 503, "not here yet"
        key = _verify.stat_key(st)
        with self._lock:
            if self._checked.get(path) == key:
                return 200, "verified"
            hit = self.cache.get(path)
            if hit and hit.get("key") == key and hit.get("entry") == _verify.entry_digest(entry):
                self._checked[path] = key
                return 200, "verified (cache)"
            hashing = self._hashing.setdefault(path, threading.Lock())
        with hashing:  # two children asking at once: the file is hashed once
            with self._lock:
                if self._checked.get(path) == key:
                    return 200, "verified"
            good = all(
                _verify._hash_range(full, p.offset, p.length) == p.sha256 for p in _verify._pieces(entry)
            )
            if not good:
                return 409, "its bytes differ from the signed manifest here"
            with self._lock:
                self._checked[path] = key
        return 200, "verified"

    def pace(self, n: int, limit: float) -> None:
        """The operator's cap on this host's uplink (all connections together), so a fan-out
        leaves room for serving traffic: each block waits for its slot at `limit` bytes/s."""
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + n / limit
        if slot > now:
            time.sleep(slot - now)

    def count(self, client: str, n: int, stats: str | None) -> None:
        with self._lock:
            self.sent[client] = self.sent.get(client, 0) + n
            now = time.monotonic()
            if not stats or (n and now - self._stats_at < _STATS_EVERY):
                return
            self._stats_at = now
            snapshot = dict(self.sent)
        write_stats(stats, snapshot)


def write_stats(path: str, sent: dict[str, int]) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fanout-stats-")
    with os.fdopen(fd, "w") as fh:
        json.dump({"sent": sent, "total": sum(sent.values()), "at": time.time()}, fh, sort_keys=True)
    os.replace(tmp, path)


def _handler(
    served: Served, token: str, stats: str | None, limit: float = 0.0,
) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60  # a reader that stops reading frees its thread

        def _refuse(self, code: int, why: str, retry: bool = False) -> None:
            body = (why + "\n").encode()
            self.send_response(code)
            if retry:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            given = self.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                self._refuse(401, "this run's fan-out token is required")
                return
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).removeprefix("/")
            try:
                _verify.check_path(path)
            except ValueError as exc:
                self._refuse(404, str(exc))
                return
            code, why = served.state(path)
            if code != 200:
                self._refuse(code, f"{path}: {why}", retry=code == 503)
                return
            size = served.listed[path]["size"]
            start = _range_start(self.headers.get("Range"), size)
            if start is None:
                self._refuse(416, f"{path}: only 'Range: bytes=N-' with N below {size} is served")
                return
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(size - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            client = self.client_address[0]
            with open(os.path.join(served.root, path), "rb") as fh:
                fh.seek(start)
                left = size - start
                while left > 0:
                    if limit:
                        served.pace(min(_BLOCK, left), limit)
                    block = fh.read(min(_BLOCK, left))
                    if not block:
                        break  # shrank since verified: the client's own verify refuses it
                    self.wfile.write(block)
                    left -= len(block)
                    served.count(client, len(block), stats)
            served.count(client, 0, stats)

        def log_message(self, *args: object) -> None:
            pass  # requests carry the token: nothing of them goes to a log

    return Handler


def _range_start(header: str | None, size: int) -> int | None:
    if not header:
        return 0
    spec = header.strip().removeprefix("bytes=")
    if not spec.endswith("-") or not spec[:-1].isdigit() or header.strip() == spec:
        return None
    start = int(spec[:-1])
    return start if start < size else None


def tls_context(cert: str, key: str, ca: str) -> ssl.SSLContext:
    """Server side: this host's certificate; clients must show one of the deployment CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cafile=ca)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def check_bind(address: str, every_address: bool = False) -> str:
    """The address serve.py listens on: the host's own deployment address, given as an IP
    literal. A name could resolve to anything, and "0", "0.0.0.0", "::" (or ::ffff:0.0.0.0)
    listen on every interface, where the hosts' other networks (a public one, a management
    one) would reach the weights' port too. Every address only when the caller says so."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        raise ValueError(f"--bind {address!r}: give the host's own deployment address as an IP "
                         "address (a name or a shorthand such as '0' is refused)") from None
    mapped = ip.ipv4_mapped if ip.version == 6 else None
    unspecified = ip.is_unspecified or (mapped is not None and mapped.is_unspecified)
    if unspecified and not every_address:
        raise ValueError(f"--bind {address}: that is every address; bind the host's own deployment "
                         "address (or pass --every-address where that is really meant)")
    return str(ip)


class _Server(ThreadingHTTPServer):
    """One thread per connection, but bounded: at most `max_connections` at once, of which at
    most `max_handshakes` may still be in their TLS handshake, and each handshake must end
    within `handshake_s` in all (not per read: a peer sending a byte every few seconds would
    outlast any per-read timeout). Anyone who can reach the port can open connections; only
    a deployment host gets past the handshake. So strangers can hold at most the handshake
    slots, for at most `handshake_s` each, and the hosts keep the rest. A connection over a
    bound is closed at once: the fetcher moves to its next source and comes back."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: socketserver's 5 drops the SYNs of a busy moment

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 max_connections: int = 64, max_handshakes: int = 16, handshake_s: float = 10.0) -> None:
        if not 1 <= max_handshakes <= max_connections:
            raise ValueError(f"{max_handshakes} handshakes and {max_connections} connections at once: "
                             "need 1 <= handshakes <= connections")
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.connections = threading.BoundedSemaphore(max_connections)
        self.handshakes = threading.BoundedSemaphore(max_handshakes)
        self.handshake_s = handshake_s
        self.turned_away = 0  # connections closed at once, over a bound
        super().__init__(address, handler)

    def server_bind(self) -> None:
        """HTTPServer's own asks DNS for the address's name (getfqdn), which can hang for
        seconds on an air-gapped host; the name is used nowhere here."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        if not self.connections.acquire(blocking=False):
            self.turned_away += 1
            self.shutdown_request(request)
            return
        if not self.handshakes.acquire(blocking=False):
            self.connections.release()
            self.turned_away += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self.handshakes.release()
            self.connections.release()
            raise

    def process_request_thread(self, request, client_address):  # type: ignore[no-untyped-def]
        try:
            shaken = _handshake(request, self.handshake_s)
        finally:
            self.handshakes.release()
        try:
            if shaken:
                self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.connections.release()


def _handshake(sock: ssl.SSLSocket, seconds: float) -> bool:
    """The TLS handshake, ended after `seconds` in all however the peer trickles its bytes.
    False for no client certificate, another CA's, no TLS at all, or too slow."""
    deadline = time.monotonic() + seconds
    sock.setblocking(False)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                sock.do_handshake()
                break
            except ssl.SSLWantReadError:
                ready = select.select([sock], [], [], left)[0]
            except ssl.SSLWantWriteError:
                ready = select.select([], [sock], [], left)[1]
            if not ready:
                return False
    except OSError:
        return False
    sock.setblocking(True)
    return True


def make_server(
    served: Served, bind: str, port: int, context: ssl.SSLContext, token: str, stats: str | None,
    limit: float = 0.0, *, max_connections: int = 64, max_handshakes: int = 16, handshake_s: float = 10.0,
) -> ThreadingHTTPServer:
    server = _Server((bind, port), _handler(served, token, stats, limit), max_connections=max_connections,
                     max_handshakes=max_handshakes, handshake_s=handshake_s)
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


def _entries(manifest: str, folder: str | None, prefix: str | None, under: list[str] | None) -> list[dict]:
    """The files served: a list's, a folder by reference, one bundle folder (`prefix`, paths
    made relative to it), or several bundle folders at once (`under`, paths kept whole, served
    from the bundle's root): a fan-out serves every weights folder the bundle carries."""
    if not under:
        return _verify._listed(manifest, folder, prefix)
    if folder or prefix:
        raise ValueError("--under serves bundle folders from the bundle's root: not with --folder or --prefix")
    return [e for e in _verify._listed(manifest, None) if any(e["path"].startswith(u) for u in under)]


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="serve.py")
    parser.add_argument("--root", required=True)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--folder")
    parser.add_argument("--prefix")
    parser.add_argument("--under", action="append", help="with a bundle's manifest.json and --root at the "
                        "bundle: serve its files under this folder (model/); repeatable")
    parser.add_argument("--cache")
    parser.add_argument("--bind", required=True, help="the host's own deployment address (an IP address)")
    parser.add_argument("--every-address", action="store_true", help="allow --bind 0.0.0.0 or :: (not the default)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--deadline-s", type=float, required=True)
    parser.add_argument("--stats")
    parser.add_argument("--limit-mb-s", type=float, default=0.0,
                        help="cap this host's serving rate, all connections together (MB/s)")
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--max-handshakes", type=int, default=16)
    parser.add_argument("--handshake-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    try:
        bind = check_bind(args.bind, args.every_address)
        token = read_token(args.token_file)
        served = Served(args.root, _entries(args.manifest, args.folder, args.prefix, args.under), args.cache)
        server = make_server(served, bind, args.port, tls_context(args.cert, args.key, args.ca),
                             token, args.stats, args.limit_mb_s * 1e6, max_connections=args.max_connections,
                             max_handshakes=args.max_handshakes, handshake_s=args.handshake_s)
    except (OSError, ValueError) as exc:
        print(json.dumps({"ok": False, "problems": [str(exc)]}))
        return 2
    if args.stats:
        write_stats(args.stats, {})
    timer = threading.Timer(args.deadline_s, server.shutdown)
    timer.daemon = True
    timer.start()
    print(json.dumps({"ok": True, "serving": f"{bind}:{server.server_address[1]}"}), flush=True)
    server.serve_forever(poll_interval=0.2)
    if args.stats:
        write_stats(args.stats, dict(served.sent))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
