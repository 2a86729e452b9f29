"""`installer status --timeout` bounds every host access it makes (#34): the real ssh client and
the real HTTP client against two loopback hosts whose SSH and gateway ports accept a connection
and never say a word (a host hung in its kernel, or a firewall that lets SYNs through to a dead
daemon). Every built-in collector runs: the release records and the VIP holder over SSH, /readyz
over HTTP. Before the fix the release records waited for ssh's own ConnectTimeout (10 s) and the
VIP read for at least 5 s, whatever --timeout said."""

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from tests.support.loopback import free_port

HOSTS = ("127.0.0.1", "127.0.0.2")
TIMEOUT_S = 1.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    """One port on both loopback hosts that completes TCP handshakes (the kernel's backlog) and is
    never accept()ed: ssh waits for a banner, HTTP for a status line, neither ever comes."""
    port = free_port()
    listeners = []
    for address in HOSTS:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((address, port))
        s.listen(64)
        listeners.append(s)
    yield port
    for s in listeners:
        s.close()


def test_silent_hosts_cost_the_timeout_not_a_hang(silent_port: int, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "known_hosts").write_text("")  # no key is ever offered: no banner
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "deployment: lab\n"
        f"hosts:\n  - {{name: h1, address: {HOSTS[0]}}}\n  - {{name: h2, address: {HOSTS[1]}}}\n"
        f"ssh: {{port: {silent_port}, known_hosts: {tmp_path / 'known_hosts'}}}\n"
        "model: {path: m, served_name: tiny}\n"
        f"ports: {{engine: 1, gateway: {silent_port}}}\ntls: {{mode: 'off'}}\n"
        # a VIP cannot be loopback; nobody holds this one, and the hosts are never asked past SSH
        "frontend: {vip: 192.0.2.100/24, router_id: 51}\n"
    )
    _register()
    start = time.monotonic()
    # Prometheus refuses at once (port 1): its queries are bounded per query already, not the point
    out = CliRunner().invoke(app, ["status", "-i", str(inv), "--prometheus", "http://127.0.0.1:1",
                                   "--timeout", str(TIMEOUT_S), "--json"])
    took = time.monotonic() - start
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["rows"]
    assert [r["host"] for r in rows] == ["h1", "h2"]
    for row in rows:
        problems = "\n".join(row["problems"])
        # each SSH read is one host's answer: killed at the status deadline, named with it
        assert f"release record unreadable: no answer within {TIMEOUT_S:.0f} s" in problems, problems
        assert f"could not read its addresses for the VIP: no answer within {TIMEOUT_S:.0f} s" in problems
        assert row["ready"] is False and "gateway unreachable" in problems
    # three host accesses one after the other (records, /readyz, VIP), each host's at once: about
    # 3 s; before the fix 10 s + 1 s + 5 s. The margin is for a loaded CI machine.
    assert took < 3 * TIMEOUT_S + 3, f"status took {took:.1f} s with --timeout {TIMEOUT_S}"
