"""weights/serve.py's bounds, with real sockets on loopback: the TLS handshake must end within
its time in all (a silent peer and one that trickles a byte at a time are both dropped), the
connections and handshakes at once are capped (strangers hold at most the handshake slots, for
at most that time; the threads do not grow with them), and the server listens only on the
address it is given: an IP literal, never every interface unless asked."""

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.weights import serve
from tests.support.weights_fanout import TOKEN, client, get


@pytest.fixture
def bounded(pki: dict[str, Path], folder: tuple[Path, list[dict]]) -> Iterator[serve._Server]:
    root, entries = folder
    context = serve.tls_context(str(pki["server"]), str(pki["server-key"]), str(pki["ca"]))
    srv = serve.make_server(serve.Served(str(root), entries), "127.0.0.1", 0, context, TOKEN, None,
                            max_connections=4, max_handshakes=2, handshake_s=1.5)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closes `sock` (reads b'' or a reset); fails past `seconds`."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server still held the connection after {seconds} s")
    return time.monotonic() - start


def test_a_silent_peer_is_dropped_when_the_handshake_time_is_up(bounded: serve._Server) -> None:
    with _raw(bounded.server_address[1]) as sock:
        assert 1.2 < _closed_within(sock, 6) < 4


def test_a_peer_trickling_its_hello_is_dropped_at_the_handshake_time_in_all(bounded: serve._Server) -> None:
    """One byte every 0.2 s keeps any per-read timeout happy; the deadline is for the whole."""
    hello = bytes.fromhex("16030100c8010000c40303") + b"\0" * 200  # a ClientHello's start, slowly
    with _raw(bounded.server_address[1]) as sock:
        start = time.monotonic()
        try:
            for byte in hello:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
                if time.monotonic() - start > 6:
                    pytest.fail("the server took a trickled handshake for 6 s")
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert time.monotonic() - start < 4


def test_strangers_hold_only_the_handshake_slots_and_only_for_the_handshake_time(
    bounded: serve._Server, pki: dict[str, Path],
) -> None:
    port = bounded.server_address[1]
    threads_before = threading.active_count()
    strangers = [_raw(port) for _ in range(30)]  # 2 take the handshake slots, 28 are closed at once
    try:
        deadline = time.monotonic() + 1.0  # within the handshake time
        while bounded.turned_away < 28 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bounded.turned_away >= 28
        assert threading.active_count() <= threads_before + 2  # no thread per stranger
        with pytest.raises((ConnectionError, OSError)):
            get(port, client(pki), "/a.safetensors")  # a host comes while strangers hold the slots
        time.sleep(1.6)  # their handshake time is up: the slots are free again
        assert get(port, client(pki), "/a.safetensors")[0] == 200
    finally:
        for sock in strangers:
            sock.close()


def test_hosts_past_the_handshake_are_capped_too(bounded: serve._Server, pki: dict[str, Path]) -> None:
    import http.client

    port = bounded.server_address[1]
    held = []
    for _ in range(4):  # four keep-alive connections of deployment hosts fill max_connections
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=client(pki), timeout=5)
        conn.request("GET", "/b.safetensors", headers={"Authorization": f"Bearer {TOKEN}"})
        assert conn.getresponse().read() and True
        held.append(conn)
    try:
        with pytest.raises((ConnectionError, OSError)):
            get(port, client(pki), "/a.safetensors")  # the fifth is turned away, not queued forever
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the freed slot comes back once the server sees the close
            try:
                assert get(port, client(pki), "/a.safetensors")[0] == 200
                break
            except (ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        for conn in held:
            conn.close()


@pytest.mark.parametrize("address", ["0", "0.0.0.0", "::", "[::]", "::ffff:0.0.0.0", "localhost", "", "0x0"])
def test_every_address_a_name_or_a_shorthand_is_refused(
    address: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    code = serve._main(["--root", str(tmp_path), "--manifest", "m", "--bind", address, "--port", "1",
                        "--cert", "c", "--key", "k", "--ca", "a", "--token-file", "t", "--deadline-s", "1"])
    problem = json.loads(capsys.readouterr().out)["problems"][0]
    assert code == 2 and "deployment address" in problem


def test_every_address_only_when_asked() -> None:
    assert serve.check_bind("0.0.0.0", every_address=True) == "0.0.0.0"
    assert serve.check_bind("[::1]") == "::1"


def test_the_server_listens_on_its_address_only(
    pki: dict[str, Path], folder: tuple[Path, list[dict]],
) -> None:
    """Bound to 127.0.0.2, another address of the same machine (127.0.0.1) is refused."""
    root, entries = folder
    context = serve.tls_context(str(pki["server"]), str(pki["server-key"]), str(pki["ca"]))
    srv = serve.make_server(serve.Served(str(root), entries), serve.check_bind("127.0.0.2"), 0, context, TOKEN, None)
    try:
        assert srv.socket.getsockname()[0] == "127.0.0.2"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=2).close()
    finally:
        srv.server_close()


def test_ipv6_addresses_listen_on_ipv6(pki: dict[str, Path], folder: tuple[Path, list[dict]]) -> None:
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6: the IPv6 bind cannot be checked")
    root, entries = folder
    context = serve.tls_context(str(pki["server"]), str(pki["server-key"]), str(pki["ca"]))
    try:
        srv = serve.make_server(serve.Served(str(root), entries), "::1", 0, context, TOKEN, None)
    except OSError as exc:
        pytest.fail(f"::1 cannot be bound here ({exc}): loopback IPv6 is off")
    try:
        assert srv.socket.family == socket.AF_INET6 and srv.socket.getsockname()[0] == "::1"
    finally:
        srv.server_close()
