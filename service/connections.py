"""Connection limits uvicorn lacks: a deadline and a size cap for request headers, and a cap
on the connections one client address may hold.

uvicorn (httptools) arms no timer on a new connection, nor on a request whose first bytes have
arrived, and httptools buffers headers without a limit: a client that opens connections and
sends nothing, or trickles its headers (slowloris), or sends endless ones, holds its connection
and memory for as long as it likes. This protocol closes a connection whose request headers are
not complete `header_timeout_s` after the connection opened or the previous response ended,
answers 431 and closes when they pass `MAX_HEADER_BYTES`, and refuses (429, closed) a
connection from an address that already holds `max_per_client` of this process's connections.
Idle connections between requests are uvicorn's keep-alive timeout; bodies are read under a
deadline by the app (service/limits.py).
"""

import asyncio
import ipaddress
import json
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


def _response(status: bytes, message: str, type_: str, code: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
        + extra + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def guarded_protocol(header_timeout_s: float, max_per_client: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with these limits; the counts are this process's."""
    open_by_client: dict[str, int] = {}
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
        _client: str | None = None  # None: refused, none of uvicorn's state was set up
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = -1  # bytes of the request head so far; -1: not waiting for one
        _head_too_large = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            client = client_address(transport.get_extra_info("peername"))
            held = open_by_client.get(client, 0)
            if held >= max_per_client:
                transport.write(too_many)
                transport.close()
                return
            open_by_client[client] = held + 1
            self._client = client
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            client = self._client
            if client is None:
                return
            self._client = None
            left = open_by_client[client] - 1
            if left:
                open_by_client[client] = left
            else:
                del open_by_client[client]
            self._stop_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._client is None:
                return
            super().data_received(data)
            # Still in the head after this chunk: all of it was head. (A chunk that completes
            # the head may carry body too; that one is not counted.)
            if self._header_bytes >= 0:
                self._header_bytes += len(data)
                if self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                    self._head_too_large = True
                    self.send_400_response("")

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
                self._await_head()

        def _await_head(self) -> None:
            self._header_bytes = 0
            self._header_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            self._header_bytes = -1
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _head_timed_out(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedProtocol
