"""Connections at the gateway, over real sockets: no kind of stalled connection outlives its
deadline, a request without a valid key is refused from its headers (its body is never read, so
unauthenticated bodies cost no memory), bodies being read count as in flight, and one address
cannot hold more than its share of connections."""

import contextlib
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TIMEOUT_S = 1.0  # header, body and keep-alive timeouts of the gateway under test
SLACK_S = 2.0  # a loaded 2-core CI machine's share


def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _status(answer: bytes) -> bytes:
    """The status code of an HTTP answer; b"" for none."""
    return answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else b""


def _address(gateway: Any) -> tuple[str, int]:
    host, port = gateway.url.removeprefix("http://").split(":")
    return host, int(port)


def _post_head(path: str, length: int, key: str | None, extra: str = "") -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def _until_closed(sock: socket.socket, limit: float, trickle: bytes = b"") -> tuple[float, bytes]:
    """Seconds until the gateway closed `sock` (inf if it did not within `limit`), and what it
    answered; `trickle` is sent every 0.2 s meanwhile, as a slow client would."""
    start = time.monotonic()
    received = b""
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if trickle:
                sock.sendall(trickle)
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:  # reset, or a broken pipe while trickling
            return time.monotonic() - start, received
        if not data:
            return time.monotonic() - start, received
        received += data
    return float("inf"), received


@pytest.fixture
def gateway_and_key(start_upstream: Any, start_gateway: Any, keys: Any) -> Callable[..., tuple[Any, str]]:
    def start(**limits: Any) -> tuple[Any, str]:
        upstream = start_upstream()
        secret = keys.create("app")
        gateway = start_gateway({
            "keys_file": str(keys.hosts_file),
            "limits": limits,
            "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
        })
        return gateway, secret

    return start


def test_every_kind_of_stalled_connection_is_closed(gateway_and_key: Callable[..., tuple[Any, str]]) -> None:
    gateway, secret = gateway_and_key(
        header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S, keepalive_timeout_s=1,
        max_body_bytes=64 * 1024,
    )
    address = _address(gateway)
    limit = TIMEOUT_S + SLACK_S

    def idle() -> tuple[float, bytes]:
        with socket.create_connection(address) as sock:
            return _until_closed(sock, limit)

    def slowloris() -> tuple[float, bytes]:
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
            return _until_closed(sock, limit, trickle=b"X-A: b\r\n")

    def huge_head() -> tuple[float, bytes]:  # fast, but too much
        with socket.create_connection(address) as sock:
            # Closed before it all went, perhaps: the answer is read below all the same.
            with contextlib.suppress(OSError):
                sock.sendall(b"GET /livez HTTP/1.1\r\nHost: gw\r\nX-Filler: " + b"a" * 200_000)
            return _until_closed(sock, limit)

    def idle_after_a_request() -> tuple[float, bytes]:
        with socket.create_connection(address) as sock:
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: gw\r\n\r\n")
            return _until_closed(sock, limit)

    def half_sent_body() -> tuple[float, bytes]:
        with socket.create_connection(address) as sock:
            sock.sendall(_post_head("/v1/chat/completions", 1000, secret) + b'{"model": "tiny",')
            return _until_closed(sock, limit)

    def after_413(trickle: bytes) -> Callable[[], tuple[float, bytes]]:
        def run() -> tuple[float, bytes]:
            with socket.create_connection(address) as sock:
                sock.sendall(_post_head("/v1/chat/completions", 1 << 20, secret))
                return _until_closed(sock, limit, trickle=trickle)

        return run

    def unauthenticated_body() -> tuple[float, bytes]:
        with socket.create_connection(address) as sock:
            sock.sendall(_post_head("/v1/embeddings", 60_000, "sk-pli-wrong") + b"[")
            return _until_closed(sock, limit, trickle=b"0," * 100)

    kinds = {
        "idle": idle,
        "slowloris": slowloris,
        "huge head": huge_head,
        "idle keep-alive": idle_after_a_request,
        "half-sent body": half_sent_body,
        "after 413": after_413(b""),
        "after 413, body still coming": after_413(b"x" * 1024),
        "unauthenticated, body still coming": unauthenticated_body,
    }
    with ThreadPoolExecutor(len(kinds)) as pool:
        results = dict(zip(kinds, pool.map(lambda run: run(), kinds.values()), strict=True))
    for kind, (seconds, _) in results.items():
        assert seconds <= limit, f"{kind}: still open after {limit} s"
    status = {kind: _status(answer) for kind, (_, answer) in results.items()}
    assert status == {
        "idle": b"",  # closed, nothing to answer
        "slowloris": b"",
        "huge head": b"431",
        "idle keep-alive": b"200",
        "half-sent body": b"408",
        "after 413": b"413",
        "after 413, body still coming": b"413",
        "unauthenticated, body still coming": b"401",
    }
    # Those answered before their body was read said they were closing; the 413s at once.
    for kind in ("half-sent body", "after 413", "unauthenticated, body still coming"):
        assert b"\r\nconnection: close\r\n" in results[kind][1].lower(), kind
    assert results["after 413"][0] < SLACK_S
    assert gateway.proc.poll() is None


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_unauthenticated_bodies_are_never_read(gateway_and_key: Callable[..., tuple[Any, str]]) -> None:
    gateway, _ = gateway_and_key()  # the default 8 MiB body limit
    address = _address(gateway)
    body_size = 8 * 1024 * 1024
    chunk = b"x" * (256 * 1024)

    def send(key: str | None) -> tuple[bytes, float]:
        """Headers, then the 401 before any of the body is sent; then the body, as far as the
        gateway lets it go."""
        with socket.create_connection(address) as sock:
            sock.settimeout(TIMEOUT_S + SLACK_S)
            start = time.monotonic()
            sock.sendall(_post_head("/v1/embeddings", body_size, key))
            answer = sock.recv(65536)
            answered = time.monotonic() - start
            sent = 0
            try:
                while sent < body_size:
                    sock.sendall(chunk)
                    sent += len(chunk)
                while sock.recv(65536):
                    pass
            except OSError:
                pass  # closed by the gateway, as it should be
            return answer, answered

    send(None)  # warm-up: the code paths of a refusal, before the baseline
    before = _peak_rss_kib(gateway.proc.pid)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, [None, "sk-pli-wrong"] * 4))
    growth_mib = (_peak_rss_kib(gateway.proc.pid) - before) / 1024
    for answer, answered in results:
        assert _status(answer) == b"401", answer[:200]
        assert answered < SLACK_S
    # Eight 8 MiB bodies read into memory would be 64 MiB and more.
    assert growth_mib < 8, f"peak RSS grew by {growth_mib:.1f} MiB"


def test_per_client_connection_cap_and_bodies_in_flight(
    gateway_and_key: Callable[..., tuple[Any, str]],
) -> None:
    cap = 4
    gateway, secret = gateway_and_key(
        max_connections_per_client=cap, max_in_flight=1, header_timeout_s=30, body_timeout_s=2
    )
    host, port = _address(gateway)
    served = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))

    def livez_from(source: str) -> int:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=source)) as client:
            return client.get(gateway.url + "/livez").status_code

    # Readiness probes may still be closing on the gateway's side: the cap is free again soon.
    _until(lambda: livez_from("127.0.0.1") == 200)
    held = [socket.create_connection((host, port), source_address=("127.0.0.1", 0)) for _ in range(cap)]
    try:
        # Only once the gateway counts all of them is one more refused.
        extra = socket.create_connection((host, port), source_address=("127.0.0.1", 0))
        seconds, answer = _until_closed(extra, SLACK_S)
        extra.close()
        assert seconds <= SLACK_S and _status(answer) == b"429", answer
        assert b"too_many_connections" in answer
        assert served.get(gateway.url + "/livez").status_code == 200  # another address is served

        # A body being read holds the in-flight slot: the cap of 1 refuses the next request.
        held[0].sendall(_post_head("/v1/chat/completions", 1000, secret) + b"{")
        time.sleep(0.3)
        auth = {"Authorization": f"Bearer {secret}"}
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        resp = served.post(gateway.url + "/v1/chat/completions", json=chat, headers=auth)
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "overloaded"
        seconds, answer = _until_closed(held[0], 2 + SLACK_S)
        assert _status(answer) == b"408"
        _until(lambda: served.post(gateway.url + "/v1/chat/completions", json=chat, headers=auth).status_code == 200)
    finally:
        for sock in held:
            sock.close()
        served.close()
    # The address's connections are counted down as they close: it is served again.
    _until(lambda: livez_from("127.0.0.1") == 200)


def _get(sock: socket.socket, path: str = "/livez") -> bytes:
    """One request on a kept-alive connection, and its whole answer."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n".encode())
    sock.settimeout(SLACK_S)
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
        data = sock.recv(65536)
        assert data, f"closed after {answer!r}"
        answer += data
    return answer


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def test_between_requests_only_the_keep_alive_timer_runs(
    gateway_and_key: Callable[..., tuple[Any, str]],
) -> None:
    # A keep-alive longer than the head deadline: idle time must not count towards the next head.
    header_s, keepalive_s = 1.0, 2
    gateway, _ = gateway_and_key(header_timeout_s=header_s, keepalive_timeout_s=keepalive_s)
    with socket.create_connection(_address(gateway)) as sock:
        assert _status(_get(sock)) == b"200"
        time.sleep(header_s + 0.5)
        assert _status(_get(sock)) == b"200"  # idle past the head deadline, still open
        # A head begun after an idle spell has its whole deadline from its first byte.
        time.sleep(0.5)
        sock.sendall(b"GET /livez HTTP/1.1\r\n")
        seconds, answer = _until_closed(sock, header_s + SLACK_S)
        assert header_s - 0.1 <= seconds <= header_s + SLACK_S and answer == b""
    with socket.create_connection(_address(gateway)) as sock:
        assert _status(_get(sock)) == b"200"
        seconds, answer = _until_closed(sock, keepalive_s + SLACK_S)
        assert keepalive_s - 0.1 <= seconds <= keepalive_s + SLACK_S  # the keep-alive timer's close
        assert answer == b""  # silent: a client may still send on it, and retry elsewhere


def test_pooled_clients_give_connections_up_before_the_gateway_does(
    gateway_and_key: Callable[..., tuple[Any, str]],
) -> None:
    """httpx's pool (the openai client's) reuses a connection idle for up to 5 s: requests 5-6 s
    apart meet no connection the gateway is closing, with the gateway's default keep-alive."""
    gateway, secret = gateway_and_key()
    expiry = httpx.Limits().keepalive_expiry or 0.0
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    def idle_close_after() -> float:
        with socket.create_connection(_address(gateway)) as sock:
            _get(sock)
            return _until_closed(sock, 15)[0]

    def every(gap: float, send: Callable[[], int]) -> list[int]:
        statuses = [send()]
        for _ in range(2):
            time.sleep(gap)
            statuses.append(send())
        return statuses

    def pooled_httpx(gap: float) -> list[int]:
        with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {secret}"}) as client:
            return every(gap, lambda: client.post("/v1/chat/completions", json=chat).status_code)

    def pooled_openai(gap: float) -> list[int]:
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0) as client:
            return every(gap, lambda: len(client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2).choices))

    gaps = [expiry - 0.05, expiry - 0.01, expiry, expiry + 0.01, expiry + 0.05, expiry + 0.5, expiry + 1]
    with ThreadPoolExecutor(2 * len(gaps) + 1) as pool:
        idle = pool.submit(idle_close_after)
        runs = [pool.submit(pooled_httpx, gap) for gap in gaps] + [pool.submit(pooled_openai, gap) for gap in gaps]
        statuses = [run.result() for run in runs]  # a connection error would raise here
        closed_after = idle.result()
    assert statuses == [[200] * 3] * len(gaps) + [[1] * 3] * len(gaps)  # answers; the openai client's choices
    # The gateway keeps an idle connection well past the clients' expiry, so that they never
    # send on one it is closing at that very moment.
    assert closed_after >= expiry + 2, closed_after


def _trickle_body(address: tuple[str, int], secret: str, length: int = 1000) -> socket.socket:
    """A POST whose body has started and is not coming: it holds its request slot."""
    sock = socket.create_connection(address)
    sock.sendall(_post_head("/v1/chat/completions", length, secret) + b"{")
    return sock


def test_one_key_with_slow_bodies_cannot_hold_the_gateway(
    start_upstream: Any, start_gateway: Any, keys: Any
) -> None:
    """A key limited to 3 requests a minute held all 256 slots by trickling bodies, and every
    other key got 503 for 30 s. Now its rate and its share of the slots are charged on the
    headers, before the body; a body below the minimum rate is cut; bodies' bytes are bounded."""
    upstream = start_upstream()
    slow = keys.create("slow", rpm=3)
    greedy = keys.create("greedy")
    fair = keys.create("fair")
    other = keys.create("other")
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "limits": {"max_in_flight": 16, "max_in_flight_per_key": 4, "body_timeout_s": 30,
                   "min_body_bytes_per_s": 0, "max_body_bytes_in_flight": 300_000, "max_body_bytes": 250_000},
        "engines": [{"name": "e1", "url": upstream.url, "model": "tiny"}],
    })
    address = _address(gateway)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    def refused(secret: str, length: int = 1000) -> bytes:
        """What the gateway answers one more trickled body (after those held are counted)."""
        time.sleep(0.3)
        with _trickle_body(address, secret, length) as sock:
            return _until_closed(sock, SLACK_S)[1]

    held: list[socket.socket] = []
    try:
        # rpm=3: the fourth is refused on its headers, its body never read
        held += [_trickle_body(address, slow) for _ in range(3)]
        got = refused(slow)
        assert _status(got) == b"429" and b"rate_limit_exceeded" in got, got
        # no rate limit, but 4 in flight at most
        held += [_trickle_body(address, greedy) for _ in range(4)]
        got = refused(greedy)
        assert _status(got) == b"429" and b"too_many_in_flight" in got, got
        # the others are served meanwhile
        resp = httpx.post(gateway.url + "/v1/chat/completions", json=chat, timeout=10,
                          headers={"Authorization": f"Bearer {fair}"})
        assert resp.status_code == 200, resp.text
        # bodies announced past a key's share of the bytes in flight (one largest body here), or
        # past the gateway's budget: 503 before they are read
        held.append(_trickle_body(address, fair, 200_000))
        got = refused(fair, 200_000)
        assert _status(got) == b"503" and b"request bodies" in got, got
        got = refused(other, 200_000)
        assert _status(got) == b"503" and b"request bodies" in got, got
        held.append(_trickle_body(address, other, 50_000))  # within both: held
        time.sleep(0.3)
        assert _until_closed(held[-1], 0.5)[0] == float("inf")
    finally:
        for sock in held:
            sock.close()


def test_a_body_below_the_minimum_rate_is_cut_before_its_deadline(
    gateway_and_key: Callable[..., tuple[Any, str]],
) -> None:
    gateway, secret = gateway_and_key(body_timeout_s=30, min_body_bytes_per_s=1000, body_rate_grace_s=0.5)
    with socket.create_connection(_address(gateway)) as sock:
        sock.sendall(_post_head("/v1/chat/completions", 100_000, secret) + b"{")
        # 20 bytes every 0.2 s: 100 bytes a second, a tenth of the minimum
        seconds, answer = _until_closed(sock, 10, trickle=b"                    ")
    assert _status(answer) == b"408", answer
    assert seconds < 0.5 + SLACK_S + 1, seconds  # the grace and a little, not the 30 s deadline


def test_a_huge_head_in_one_write_is_refused(gateway_and_key: Callable[..., tuple[Any, str]]) -> None:
    """The head was counted after httptools parsed the chunk: a whole 100 KiB head in one write
    went through the 64 KiB cap."""
    gateway, _ = gateway_and_key()
    with socket.create_connection(_address(gateway)) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: gw\r\nX-Filler: " + b"a" * 100_000 + b"\r\n\r\n")
        _, answer = _until_closed(sock, SLACK_S)
    assert _status(answer) == b"431", answer[:200]
