"""weights/serve.py, a host's fan-out server, on 127.0.0.1 in this process: only a client with a
certificate of the deployment CA and this run's token gets bytes; a file is served only once it
is here and verified against the signed list (503 until it is here, 409 when its bytes differ);
Range resumes; a token file others can read and a bind to every address are refused."""

import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.weights import serve
from tests.support.weights_fanout import TOKEN, client, get


@pytest.fixture
def server(pki: dict[str, Path], folder: tuple[Path, list[dict]]) -> Iterator[int]:
    root, entries = folder
    context = serve.tls_context(str(pki["server"]), str(pki["server-key"]), str(pki["ca"]))
    srv = serve.make_server(serve.Served(str(root), entries), "127.0.0.1", 0, context, TOKEN, None)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_a_deployment_host_with_the_token_gets_a_verified_file_and_can_resume(
    server: int, pki: dict[str, Path], folder: tuple[Path, list[dict]],
) -> None:
    root, _ = folder
    data = (root / "a.safetensors").read_bytes()
    assert get(server, client(pki), "/a.safetensors")[::2] == (200, data)
    status, headers, body = get(server, client(pki), "/a.safetensors", rng="bytes=1000-")
    assert (status, body) == (206, data[1000:])
    assert headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"


@pytest.mark.parametrize("who", [None, "stranger"])
def test_a_client_without_a_deployment_certificate_fails_the_handshake(
    server: int, pki: dict[str, Path], who: str | None,
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(server, client(pki, who), "/a.safetensors")


@pytest.mark.parametrize("token", ["", "b" * 40, TOKEN[:-1]])
def test_a_deployment_host_without_this_run_s_token_gets_401_and_no_byte(
    server: int, pki: dict[str, Path], token: str,
) -> None:
    status, _, body = get(server, client(pki), "/a.safetensors", token=token)
    assert status == 401 and b"token" in body


def test_only_listed_files_here_and_verified_are_served(
    server: int, pki: dict[str, Path], folder: tuple[Path, list[dict]],
) -> None:
    root, _ = folder
    assert get(server, client(pki), "/../weights.json")[0] == 404
    assert get(server, client(pki), "/unlisted.bin")[0] == 404
    status, headers, _ = get(server, client(pki), "/later.safetensors")
    assert status == 503 and headers["Retry-After"] == "1"  # not here yet: the fetcher waits
    (root / "b.safetensors").write_bytes(b"\0" * 1000)  # right size, wrong bytes
    status, _, body = get(server, client(pki), "/b.safetensors")
    assert status == 409 and b"differ from the signed manifest" in body
    assert get(server, client(pki), "/a.safetensors", rng="bytes=999999999-")[0] == 416


def test_a_token_file_others_can_read_or_a_short_token_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o644)
    with pytest.raises(ValueError, match="0600"):
        serve.read_token(str(path))
    path.chmod(0o600)
    assert serve.read_token(str(path)) == TOKEN
    path.write_text("short")
    with pytest.raises(ValueError, match="shorter than 32"):
        serve.read_token(str(path))


def test_binding_every_address_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = serve._main(["--root", str(tmp_path), "--manifest", "m", "--bind", "0.0.0.0", "--port", "1",
                        "--cert", "c", "--key", "k", "--ca", "a", "--token-file", "t", "--deadline-s", "1"])
    assert code == 2
    assert "host's own deployment address" in json.loads(capsys.readouterr().out)["problems"][0]
