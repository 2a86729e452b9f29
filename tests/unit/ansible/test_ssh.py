"""The ssh command lines we build, read back by the real ssh client (`ssh -G` prints what it
would do without connecting) and by Ansible's: a user, an address or a path stays one."""

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko
import pytest
from ansible.plugins.connection import ConnectionBase

from installer.ansible import render
from installer.hosts.ssh import Target, known_hosts_option
from installer.inventory import Inventory
from installer.planning import plan as deployment_plan


def _resolved(target: Target, tmp_path: Path) -> tuple[int, dict[str, str]]:
    """ssh's exit status and its resolved settings for the argv `target` builds."""
    argv = target.ssh_argv("true")
    # -G: print the configuration and exit; -F none: ignore this machine's ~/.ssh/config.
    proc = subprocess.run(
        [argv[0], "-G", "-F", "none", *argv[1:]],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
        cwd=tmp_path,
    )
    settings = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    return proc.returncode, settings


def test_user_port_and_address_reach_ssh_as_themselves(tmp_path: Path) -> None:
    rc, got = _resolved(Target("h1", "gpu-1.example.internal", "ubuntu", 2222, None, None), tmp_path)
    assert rc == 0
    assert (got["user"], got["hostname"], got["port"]) == ("ubuntu", "gpu-1.example.internal", "2222")


@pytest.mark.parametrize(
    ("user", "address"),
    [("-oProxyCommand=touch pwned", "10.0.0.1"), ("root", "-oProxyCommand=touch pwned")],
    ids=["user", "address"],
)
def test_an_option_shaped_user_or_address_is_never_an_option(user: str, address: str, tmp_path: Path) -> None:
    # The inventory refuses both; this holds even for a Target built some other way.
    rc, got = _resolved(Target("h1", address, user, 22, None, None), tmp_path)
    assert "proxycommand" not in got, got
    assert rc != 0  # ssh refuses the name itself ("contains invalid characters")
    assert not (tmp_path / "pwned").exists()


@contextmanager
def _ssh_server(host_key: Path) -> Iterator[int]:
    """An SSH server on loopback that shows `host_key` and refuses every login; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    key = paramiko.Ed25519Key.from_private_key_file(str(host_key))

    def serve() -> None:
        conn, _ = listener.accept()
        with paramiko.Transport(conn) as transport:
            transport.add_server_key(key)
            try:
                transport.start_server(server=paramiko.ServerInterface())
            except (EOFError, paramiko.SSHException):
                return  # the client hung up during the handshake (a host key it refused)
            while transport.is_active():
                time.sleep(0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(timeout=10)


def test_a_known_hosts_path_with_a_space_still_checks_the_host_key(tmp_path: Path) -> None:
    host_key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    known = tmp_path / "my project" / "known_hosts"
    known.parent.mkdir()
    with _ssh_server(host_key) as port:
        known.write_text(f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}")
        target = Target("h1", "127.0.0.1", "nobody", port, None, known)
        proc = subprocess.run(target.ssh_argv("true"), capture_output=True, text=True, timeout=30, check=False)
    # Past the host key check (the key was found in that file); then the server refuses the login.
    assert "Host key verification failed" not in proc.stderr, proc.stderr
    assert "Permission denied" in proc.stderr, proc.stderr


def test_ansible_gets_the_known_hosts_option_as_one_argument(tmp_path: Path) -> None:
    known = tmp_path / "my project" / "known_hosts"
    inv = Inventory.model_validate(
        {
            "deployment": "demo",
            "model": {"path": str(tmp_path), "served_name": "m"},
            "ssh": {"known_hosts": str(known)},
            "hosts": [{"name": "h1", "address": "10.0.0.1"}],
            "engine": {"device": "cpu"},
        }
    )
    common = render.hosts_yaml(deployment_plan.build(inv))["all"]["hosts"]["h1"]["ansible_ssh_common_args"]
    # Ansible's own ssh connection splits the string this way; the option is the one tested above.
    assert known_hosts_option(known) in ConnectionBase._split_ssh_args(common)
