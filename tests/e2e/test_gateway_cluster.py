"""Two gateways, one deployment: per-key limits shared through the Redis the installer set up
(TLS, password, client certificates), and keys that reach the gateways without a deploy."""

import socket
import ssl
import time

import httpx
import pytest

from installer.hosts import prove
from installer.inventory import load_inventory
from tests.support.e2e import Run, installer

pytestmark = pytest.mark.e2e


def test_redis_takes_only_tls_with_a_deployment_certificate(deployed: Run, lab_hosts) -> None:
    inv = load_inventory(lab_hosts.inventory_path)
    address = inv.hosts[0].address
    with socket.create_connection((address, 6379), timeout=5) as s:  # plain RESP: no answer
        s.sendall(b"PING\r\n")
        s.settimeout(5)
        try:
            reply = s.recv(64)
        except (TimeoutError, ConnectionResetError):
            reply = b""
        assert not reply.startswith((b"+PONG", b"-NOAUTH"))
    ctx = ssl.create_default_context(cafile=prove.ca_file(inv))
    reply = b""
    try:  # no client certificate: the handshake (TLS 1.3: the first read) fails
        with socket.create_connection((address, 6379), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=address) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
    except (ssl.SSLError, OSError):
        pass
    assert reply == b""


def test_limits_hold_across_both_gateways(deployed: Run, lab_hosts) -> None:
    inv = load_inventory(lab_hosts.inventory_path)
    name = f"shared-{int(time.time())}"
    proc = installer("keys", "create", "--name", name, "--rpm", "4", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "have it now" in proc.stdout
    secret = next(line for line in proc.stdout.splitlines() if line.startswith("sk-pli-"))
    urls = [f"{prove.gateway_base(inv, h.address)}/v1" for h in inv.hosts]
    client = httpx.Client(verify=ssl.create_default_context(cafile=prove.ca_file(inv)), timeout=60,
                          headers={"Authorization": f"Bearer {secret}"})
    # The gateways reload the key file on their own; /v1/models does not count against limits.
    deadline = time.monotonic() + 30
    while not all(client.get(u + "/models").status_code == 200 for u in urls):
        assert time.monotonic() < deadline, "the new key did not reach both gateways"
        time.sleep(1)
    body = {"model": inv.model.served_name, "prompt": "hi", "max_tokens": 1}
    statuses = [client.post(urls[i % 2] + "/completions", json=body).status_code for i in range(4)]
    assert statuses == [200, 200, 200, 200]
    for url in urls:  # the fifth is refused by either gateway: the bucket is shared
        r = client.post(url + "/completions", json=body)
        assert r.status_code == 429, r.text
        assert int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["type"]

    proc = installer("keys", "revoke", name, "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    deadline = time.monotonic() + 30
    while not all(client.get(u + "/models").status_code == 401 for u in urls):
        assert time.monotonic() < deadline, "the revocation did not reach both gateways"
        time.sleep(1)
