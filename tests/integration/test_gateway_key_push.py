"""`installer keys ... -i` confirms, on each gateway's /readyz, that the key and quota files it
sent are the ones loaded (installer/flows/keys_push.py): real gateways (uvicorn) reloading files
written as the push writes them; a gateway that kept its old keys is named."""

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from installer.flows.keys_push import confirm_at
from installer.secrets import keys as installer_keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_gateway_confirms_the_files_it_loaded_and_one_that_kept_the_old_keys_is_named(
    start_upstream: Any, start_gateway: Any, keys: Any
) -> None:
    upstream = start_upstream()
    keys.create("team")
    gateway = start_gateway({
        "keys_file": str(keys.hosts_file),
        "engines": [{"name": "e", "url": upstream.url, "model": "tiny"}],
    })
    quotas_file = keys.hosts_file.with_name("quotas.json")
    # a revocation and a quota, pushed: confirmed once the gateway reloaded both
    keys.create("budget", quota_tokens=100, quota_period="day")
    keys.revoke("team")
    roles_file = keys.hosts_file.with_name("key_roles.json")
    want = {"keys_sha256": _sha(keys.hosts_file), "quotas_sha256": _sha(quotas_file), "roles_sha256": _sha(roles_file)}
    assert confirm_at({"gw": gateway.url}, want, None, timeout_s=20) == []
    # a file the gateway cannot read: it keeps the previous keys, and says so on /readyz
    quotas_file.write_text('{"version": 1, "quotas": [{"name": "budget"}]}')
    assert confirm_at({"gw": gateway.url}, {**want, "quotas_sha256": _sha(quotas_file)}, None, timeout_s=3) == [
        "gw: its gateway still serves the previous key file (its journal says why it did not load the new one)"
    ]
    installer_keys.write_hosts_file(keys.hosts_file, installer_keys.load(keys.store))
    assert confirm_at({"gw": gateway.url}, want, None, timeout_s=20) == []


@pytest.fixture
def older_gateway() -> Iterator[str]:
    """A /readyz as gateways before this change answer it: no digests."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ready", "engines": {"e": True}, "outstanding": {"e": 0}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_gateway_that_cannot_say_what_it_loaded_or_does_not_answer_is_named(older_gateway: str) -> None:
    assert confirm_at({"old": older_gateway, "gone": "http://127.0.0.1:9"},
                      {"keys_sha256": "a" * 64, "quotas_sha256": "b" * 64}, None,
                      timeout_s=1) == [
        "old: its gateway does not report the key file it loaded (a release before this one)",
        "gone: its gateway did not answer /readyz: URLError: <urlopen error [Errno 111] Connection refused>",
    ]
