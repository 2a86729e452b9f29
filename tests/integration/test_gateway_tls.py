"""The gateway over real TLS on loopback: certificates from the installer's own CA, the official
openai client, engines reached over mutual TLS, a renewal under streaming load."""

import datetime as dt
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from cryptography import x509

from installer.hosts.prove import prove_host
from installer.tls import ca
from tests.support import REPO
from tests.support.loopback import free_port, stop

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LOCAL = (["localhost"], ["127.0.0.1"])


class PKI:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.authority = ca.create_ca("it")
        self.ca_file = root / "ca.pem"
        self.ca_file.write_bytes(self.authority.cert_pem)

    def issue(self, name: str, names: tuple[list[str], list[str]] = LOCAL, days: int = 30,
              now: dt.datetime | None = None) -> tuple[Path, Path]:
        issued = ca.issue_server(self.authority, name, names[0], names[1], days, now=now)
        cert, key = self.root / f"{name}.pem", self.root / f"{name}.key"
        self.write(cert, issued.cert_pem)
        self.write(key, issued.key_pem)
        return cert, key

    @staticmethod
    def write(path: Path, data: bytes) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # as Ansible's copy does: never a half-written file


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    return PKI(tmp_path)


def _wait(url: str, proc: subprocess.Popen[bytes], verify: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, verify=verify, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(url)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        stop(proc, signal.SIGKILL)


@pytest.fixture
def tls_upstream(pki: PKI, procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> Callable[..., str]:
    """The fake engine behind TLS that requires a client certificate from the deployment CA,
    as the engines are run (vLLM --ssl-ca-certs --ssl-cert-reqs 2)."""

    def start(chunks: int = 16, delay_ms: float = 0) -> str:
        cert, key = pki.issue("engine")
        port = free_port()
        code = (
            "import ssl, sys; from aiohttp import web; sys.path.insert(0, 'benchmarks');"
            "import fake_upstream as f;"
            "ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=sys.argv[3]);"
            "ctx.verify_mode = ssl.CERT_REQUIRED; ctx.load_cert_chain(sys.argv[1], sys.argv[2]);"
            "opts = f.build_parser().parse_args(['--port', sys.argv[4], '--model', 'tiny',"
            " '--chunks', sys.argv[5], '--delay-ms', sys.argv[6]]);"
            "web.run_app(f.make_app(opts), host='127.0.0.1', port=int(sys.argv[4]), ssl_context=ctx,"
            " print=None, access_log=None)"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(cert), str(key), str(pki.ca_file), str(port), str(chunks), str(delay_ms)],
            cwd=REPO,
        )
        procs.append(proc)
        url = f"https://localhost:{port}"
        probe = ssl.create_default_context(cafile=pki.ca_file)
        probe.load_cert_chain(*pki.issue("probe-client"))
        _wait(url + "/health", proc, probe)
        return url

    return start


@pytest.fixture
def tls_gateway(pki: PKI, procs: list[subprocess.Popen[bytes]], tmp_path: Path, start_upstream: Any,
                keys: Any) -> Callable[..., dict[str, Any]]:
    def start(engines: list[dict[str, str]] | None = None, cert_name: str = "gateway",
              names: tuple[list[str], list[str]] = LOCAL, now: dt.datetime | None = None,
              days: int = 30, **extra: Any) -> dict[str, Any]:
        cert, key = pki.issue(cert_name, names, days=days, now=now)
        if engines is None:
            engines = [{"name": "local", "url": start_upstream().url, "model": "tiny"}]
        port = free_port()
        secret = keys.create(f"k{port}")
        config = {
            "port": port,
            "keys_file": str(keys.hosts_file),
            "health_interval_s": 0.5,
            "access_log": str(tmp_path / f"access-{port}.jsonl"),
            "engines": engines,
            "tls": {"certfile": str(cert), "keyfile": str(key), "ca_file": str(pki.ca_file),
                    "reload_interval_s": 0.2},
            **extra,
        }
        path = tmp_path / f"gateway-{port}.yaml"
        path.write_text(yaml.safe_dump(config))
        out = (tmp_path / f"gateway-{port}.out").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PLI_GATEWAY_CONFIG": str(path)})
        procs.append(proc)
        wait_ctx = ssl.create_default_context(cafile=str(pki.ca_file))
        wait_ctx.check_hostname = False
        wait_ctx.verify_mode = ssl.CERT_NONE  # an expired certificate must still let us wait
        _wait(f"https://127.0.0.1:{port}/readyz", proc, wait_ctx)
        return {"port": port, "url": f"https://localhost:{port}", "secret": secret, "cert": cert, "key": key,
                "output": tmp_path / f"gateway-{port}.out"}

    return start


def _client(gw: dict[str, Any], verify: Any) -> openai.OpenAI:
    if isinstance(verify, str):  # a CA bundle, the way the README shows it
        verify = ssl.create_default_context(cafile=verify)
    return openai.OpenAI(base_url=gw["url"] + "/v1", api_key=gw["secret"], max_retries=0,
                         http_client=httpx.Client(verify=verify))


def _chat(client: openai.OpenAI) -> str:
    answer = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=3)
    return answer.choices[0].message.content or ""


def test_openai_client_with_the_ca_bundle_and_without(pki: PKI, tls_gateway: Any) -> None:
    gw = tls_gateway()
    assert _chat(_client(gw, str(pki.ca_file))) == " tok0 tok1 tok2"
    # The system trust store does not know the deployment CA: the client refuses the gateway.
    with pytest.raises(openai.APIConnectionError) as err:
        _chat(_client(gw, True))
    assert "CERTIFICATE_VERIFY_FAILED" in repr(err.value.__cause__)


def test_tls_versions_ciphers_and_the_expiry_gauge(pki: PKI, tls_gateway: Any, scrape_token: Any) -> None:
    gw = tls_gateway(metrics_token_file=str(scrape_token.file))
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    with socket.create_connection(("127.0.0.1", gw["port"])) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.version() == "TLSv1.3"  # preferred when the client has it
    ctx12 = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", gw["port"])) as raw, \
            ctx12.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.version() == "TLSv1.2"
        name, _, bits = tls.cipher()
        assert name.startswith("ECDHE-") and ("GCM" in name or "CHACHA20" in name) and bits >= 128
    weak = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    weak.check_hostname, weak.verify_mode = False, ssl.CERT_NONE
    weak.set_ciphers("AES128-SHA:@SECLEVEL=0")  # no forward secrecy, CBC: refused
    weak.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", gw["port"])) as raw, pytest.raises(ssl.SSLError):
        weak.wrap_socket(raw, server_hostname="localhost")
    metrics = httpx.get(gw["url"] + "/metrics", verify=ssl.create_default_context(cafile=pki.ca_file),
                        headers=scrape_token.headers).text
    expected = x509.load_pem_x509_certificate(gw["cert"].read_bytes()).not_valid_after_utc.timestamp()
    line = next(x for x in metrics.splitlines() if x.startswith("pli_tls_cert_expiry_timestamp_seconds "))
    assert float(line.split()[1]) == expected


def test_plain_http_to_the_https_port_gets_no_answer(tls_gateway: Any) -> None:
    gw = tls_gateway()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{gw['port']}/readyz", timeout=3)


def test_a_separate_metrics_port_follows_the_tls_setting(pki: PKI, tls_gateway: Any, scrape_token: Any) -> None:
    port = free_port()
    tls_gateway(metrics_host="127.0.0.1", metrics_port=port, metrics_token_file=str(scrape_token.file))
    verify = ssl.create_default_context(cafile=pki.ca_file)
    text = httpx.get(f"https://localhost:{port}/metrics", verify=verify, headers=scrape_token.headers).text
    assert "pli_tls_cert_expiry_timestamp_seconds" in text
    assert httpx.get(f"https://localhost:{port}/metrics", verify=verify).status_code == 401
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=3)


def test_expired_and_wrong_host_certificates_give_clear_errors(pki: PKI, tls_gateway: Any, tmp_path: Path) -> None:
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
    expired = tls_gateway(cert_name="expired", now=past, days=30)
    proof = prove_host(f"https://localhost:{expired['port']}", "h1", "tiny", expired["secret"], ca_file=pki.ca_file)
    assert not proof.ok
    assert "certificate of" in proof.detail and "has expired" in proof.detail, proof.detail
    assert "installer up" in proof.detail, proof.detail

    other = tls_gateway(cert_name="other", names=(["gpu-9.example"], ["10.9.9.9"]))
    proof = prove_host(f"https://127.0.0.1:{other['port']}", "h1", "tiny", other["secret"], ca_file=pki.ca_file)
    assert not proof.ok
    assert "does not match" in proof.detail and "127.0.0.1" in proof.detail, proof.detail

    good = tls_gateway()
    proof = prove_host(good["url"], "h1", "tiny", good["secret"], ca_file=pki.ca_file)
    assert proof.ok, proof.detail


def test_engines_over_mutual_tls(pki: PKI, tls_gateway: Any, tls_upstream: Any) -> None:
    engine = tls_upstream()
    # Without a client certificate from the deployment CA the engine refuses the handshake.
    with pytest.raises(httpx.TransportError):
        httpx.get(engine + "/v1/models", verify=ssl.create_default_context(cafile=pki.ca_file), timeout=3)
    with pytest.raises(httpx.TransportError):
        httpx.get(engine.replace("https://", "http://") + "/v1/models", timeout=3)
    gw = tls_gateway(engines=[{"name": "remote", "url": engine, "model": "tiny"}])
    assert _chat(_client(gw, str(pki.ca_file))) == " tok0 tok1 tok2"


def test_renewal_under_streaming_load_drops_nothing(pki: PKI, tls_gateway: Any, tls_upstream: Any) -> None:
    engine = tls_upstream(chunks=40, delay_ms=50)  # each stream lasts about 2 s
    gw = tls_gateway(engines=[{"name": "remote", "url": engine, "model": "tiny"}])
    serial_before = x509.load_pem_x509_certificate(gw["cert"].read_bytes()).serial_number
    results: list[str] = []
    errors: list[BaseException] = []
    stop_at = time.monotonic() + 6

    def load() -> None:
        while time.monotonic() < stop_at:
            client = _client(gw, str(pki.ca_file))  # a new connection, so new handshakes keep coming
            try:
                stream = client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=40, stream=True)
                results.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
            except BaseException as exc:
                errors.append(exc)
            client.close()

    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    # What `installer up` does on renewal: new files in place, no restart.
    issued = ca.issue_server(pki.authority, "gateway", *LOCAL, 60)
    pki.write(gw["key"], issued.key_pem)
    pki.write(gw["cert"], issued.cert_pem)
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) >= 12 and all(r.count("tok") == 40 for r in results)
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    with socket.create_connection(("127.0.0.1", gw["port"])) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        served = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
    assert served.serial_number != serial_before
    assert served.serial_number == x509.load_pem_x509_certificate(issued.cert_pem).serial_number
    assert "reloaded TLS certificate" in gw["output"].read_text()


HEAD_S = 1.0  # the head deadline (handshake included) of the gateways below
SLACK_S = 2.0  # a loaded 2-core CI machine's share


def _open_for(sock: socket.socket, limit: float, trickle: bytes = b"") -> float:
    """Seconds until the gateway closed `sock` (inf if it did not within `limit`); `trickle` is
    sent every 0.2 s meanwhile, as a slow client would."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if trickle:
                sock.sendall(trickle)
            if not sock.recv(65536):
                break
        except TimeoutError:
            continue
        except OSError:  # reset, a broken pipe, or TLS's end of stream without its close_notify
            break
    else:
        return float("inf")
    return time.monotonic() - start


def _until(check: Callable[[], Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _client_hello() -> bytes:
    hello = ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), hello, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return hello.read()


@pytest.mark.parametrize("workers", [1, 2])  # 2: uvicorn serves the supervisor's socket, as systemd's
def test_stalled_handshakes_and_heads_are_closed(pki: PKI, tls_gateway: Any, workers: int) -> None:
    gw = tls_gateway(workers=workers, limits={"header_timeout_s": HEAD_S})
    address = ("127.0.0.1", gw["port"])
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    limit = HEAD_S + SLACK_S

    def silent() -> float:  # TCP, then nothing: no ClientHello
        with socket.create_connection(address) as sock:
            return _open_for(sock, limit)

    def half_hello() -> float:
        with socket.create_connection(address) as sock:
            hello = _client_hello()
            sock.sendall(hello[: len(hello) // 2])
            return _open_for(sock, limit)

    def no_request() -> float:  # the handshake, then nothing: the deadline runs from the accept
        with socket.create_connection(address) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return _open_for(tls, limit)

    def slowloris() -> float:
        with socket.create_connection(address) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
            return _open_for(tls, limit, trickle=b"X-A: b\r\n")

    kinds = {"silent": silent, "half a ClientHello": half_hello, "no request": no_request, "slowloris": slowloris}
    with ThreadPoolExecutor(len(kinds)) as pool:
        seconds = dict(zip(kinds, pool.map(lambda run: run(), kinds.values()), strict=True))
    assert all(s <= limit for s in seconds.values()), f"still open after {limit} s: {seconds}"
    # Served as before: a whole request over TLS.
    assert _chat(_client(gw, str(pki.ca_file))) == " tok0 tok1 tok2"


def test_connections_count_against_the_cap_before_their_handshake(pki: PKI, tls_gateway: Any) -> None:
    cap = 2
    gw = tls_gateway(limits={"max_connections_per_client": cap, "header_timeout_s": 30})
    address = ("127.0.0.1", gw["port"])
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))

    def handshake_from(source: str) -> str:
        with socket.create_connection(address, timeout=SLACK_S, source_address=(source, 0)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.version() or ""

    # The readiness probes' connections (from 127.0.0.1) may still be closing on the gateway's
    # side; a handshake served from another address means its loop has run past their close.
    # Not from 127.0.0.1 itself: that probe's own close could be counted after the stalled
    # connections arrive, refusing one of them and leaving room for the one that must be refused.
    _until(lambda: handshake_from("127.0.0.3"))
    stalled = [socket.create_connection(address, source_address=("127.0.0.1", 0)) for _ in range(cap)]
    try:
        start = time.monotonic()
        with pytest.raises(OSError):  # closed before the handshake: TLS cannot carry a 429 yet
            handshake_from("127.0.0.1")
        assert time.monotonic() - start < SLACK_S
        assert handshake_from("127.0.0.2").startswith("TLSv1")  # another address is served
    finally:
        for sock in stalled:
            sock.close()
    _until(lambda: _chat(_client(gw, str(pki.ca_file))) == " tok0 tok1 tok2")  # counted down again
