"""Connection limits uvicorn lacks: a deadline and a size cap for request heads, a cap on the
connections one client address may hold, and, over TLS, both from the moment of the accept.

uvicorn (httptools) arms no timer on a new connection, nor on a request whose first bytes have
arrived, and httptools buffers headers without a limit: a client that opens connections and
sends nothing, or trickles its headers (slowloris), or sends endless ones, holds its connection
and memory for as long as it likes. This protocol closes a connection whose request head is not
complete `header_timeout_s` after the connection opened or after the head's first byte (on a
kept-alive connection), answers 431 and closes when a head passes `MAX_HEADER_BYTES`, and
refuses (429, closed) a connection from an address that already holds `max_per_client` of this
process's connections. Between two requests the connection is uvicorn's: its keep-alive timer
closes it when idle, and no deadline of ours runs then, so the two never race. Bodies are read
under a deadline by the app (service/limits.py).

Over TLS the loop's own TLS (`create_server(ssl=...)`) would show this protocol nothing until
the handshake is done, and give a stalled handshake 60 s, uncounted. So the server listens in
plain TCP and `TLSGate` counts the connection at the accept, refuses it there above the cap
(closed: no 429 can be said before a handshake), and upgrades it with `loop.start_tls` under
the same deadline: handshake and request head together within `header_timeout_s`.
"""

import asyncio
import ipaddress
import json
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Request line and headers; what the usual servers accept (nginx 4 x 8 KiB, Node 16 KiB) and more.
MAX_HEADER_BYTES = 64 * 1024


def client_address(peer: Any) -> str:
    """What the cap counts by: the IPv4 address, or the /64 of an IPv6 one (one host's usual
    share: counting single IPv6 addresses would cap nothing)."""
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    if ":" not in host:
        return str(host)
    try:
        addr = ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return host
    if addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(ipaddress.IPv6Network((addr, 64), strict=False))


class ConnectionCounts:
    """Connections held per client address, in this process."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held: dict[str, int] = {}

    def take(self, transport: asyncio.BaseTransport) -> str | None:
        """The connection's address, now counted; None when the address holds the cap already."""
        client = client_address(transport.get_extra_info("peername"))
        held = self.held.get(client, 0)
        if held >= self.cap:
            return None
        self.held[client] = held + 1
        return client

    def give_back(self, client: str) -> None:
        left = self.held[client] - 1
        if left:
            self.held[client] = left
        else:
            del self.held[client]


def run_now(coro: Coroutine[Any, Any, Any], done: Callable[[Any], None]) -> None:
    """Run coro's first step at once, not at the loop's next turn as a task would (as Python
    3.12's eager tasks do), the rest as the futures it waits on complete; then done(its result,
    or None if it raised)."""

    def step(_: object = None) -> None:
        try:
            waiting = coro.send(None)
        except StopIteration as finished:
            done(finished.value)
        except Exception:  # a failed or timed-out handshake: start_tls closed the connection
            done(None)
        else:
            waiting.add_done_callback(step)

    step()


def _response(status: bytes, message: str, type_: str, code: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
        + extra + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def guarded_protocol(
    header_timeout_s: float, max_per_client: int, tls: ssl.SSLContext | None = None
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with these limits (and TLS, when given a context); the
    counts are this process's."""
    counts = ConnectionCounts(max_per_client)
    too_many = _response(
        b"429 Too Many Requests",
        f"Too many connections from this address (at most {max_per_client}); reuse connections.",
        "rate_limit_error",
        "too_many_connections",
        b"retry-after: 1\r\n",
    )
    too_large = _response(
        b"431 Request Header Fields Too Large",
        f"Request headers are larger than {MAX_HEADER_BYTES} bytes.",
        "invalid_request_error",
        "headers_too_large",
    )

    class GuardedProtocol(HttpToolsProtocol):
        _client: str | None = None  # None: not admitted, none of uvicorn's state was set up
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = -1  # bytes of the request head so far; -1: not waiting for one
        _head_tail = b""  # the head's last 3 bytes so far: its blank line may span two chunks
        _head_too_large = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            client = counts.take(transport)
            if client is None:
                transport.write(too_many)
                transport.close()
                return
            self.admit(client, transport, header_timeout_s)

        def admit(self, client: str, transport: asyncio.Transport, head_within_s: float) -> None:
            """Serve the connection, counted for `client`; its first head is due in head_within_s."""
            self._client = client
            super().connection_made(transport)
            self._await_head()
            self._arm_head_timer(head_within_s)

        def connection_lost(self, exc: Exception | None) -> None:
            client = self._client
            if client is None:
                return
            self._client = None
            counts.give_back(client)
            self._stop_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._client is None:
                return
            if self._header_bytes == 0 and self._header_timer is None:
                # The first byte after an idle keep-alive: the head is due from now on.
                self._arm_head_timer(header_timeout_s)
            if self._header_bytes >= 0:
                # Counted before httptools sees the chunk: it parses a whole head that arrives in
                # one write, however large. The head ends at its blank line; a chunk without one
                # is all head.
                tail = self._head_tail if self._header_bytes > 0 else b""
                end = (tail + data).find(b"\r\n\r\n")
                head = len(data) if end < 0 else max(0, end + 4 - len(tail))
                self._head_tail = (tail + data)[-3:]
                if self._header_bytes + head > MAX_HEADER_BYTES:
                    if not self.transport.is_closing():
                        self._head_too_large = True
                        self.send_400_response("")
                    return
            super().data_received(data)
            if self._header_bytes >= 0:  # still in the head after this chunk
                self._header_bytes += len(data)

        def send_400_response(self, msg: str) -> None:
            # uvicorn's answer to a request it cannot parse, and ours to an oversized head.
            self._stop_head_timer()
            if self._head_too_large:
                self.transport.write(too_large)
                self.transport.close()
                return
            super().send_400_response(msg)

        def on_headers_complete(self) -> None:
            self._stop_head_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # its head is complete already
            super().on_response_complete()
            if not pipelined and not self.transport.is_closing():
                # Idle now: uvicorn's keep-alive timer runs; ours starts with the next byte.
                self._await_head()

        def _await_head(self) -> None:
            self._header_bytes = 0

        def _arm_head_timer(self, seconds: float) -> None:
            self._header_timer = self.loop.call_later(seconds, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            self._header_bytes = -1
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _head_timed_out(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    if tls is None:
        return GuardedProtocol
    context = tls  # not None, for the type checker inside the class

    class TLSGate(asyncio.Protocol):
        """A connection until its handshake is done; then the GuardedProtocol's."""

        def __init__(self, **uvicorn_args: Any) -> None:
            self.uvicorn_args = uvicorn_args

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            client = counts.take(transport)
            if client is None:
                transport.close()
                return
            http = GuardedProtocol(**self.uvicorn_args)
            loop = http.loop
            accepted = loop.time()

            def handed_over(tls_transport: asyncio.Transport | None) -> None:
                if tls_transport is None or tls_transport.is_closing():  # failed, or gone since
                    counts.give_back(client)
                    transport.close()
                    return
                # uvloop passes the first request bytes on only after this (asyncio's own loop
                # would not wait: the gateway runs on uvloop).
                http.admit(client, tls_transport, header_timeout_s - (loop.time() - accepted))

            # At once: start_tls takes the transport over before this returns, so the first
            # bytes of the handshake reach TLS, never this protocol.
            run_now(
                loop.start_tls(transport, http, context, server_side=True, ssl_handshake_timeout=header_timeout_s),
                handed_over,
            )

    return TLSGate
