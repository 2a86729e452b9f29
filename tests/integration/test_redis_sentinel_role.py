"""redis.replicas through real Ansible and real Redis (#37 item 2): an inventory of two serving
hosts and a monitoring host (127.0.0.1-3 on loopback) is planned and rendered; the redis role's
primary lookup and templates give each host its redis.conf and sentinel.conf; run as real
redis-server and Sentinel processes (TLS, password) they replicate; after the primary is
SIGKILLed the sentinels promote the replica, and rendering again asks the sentinels and makes
the old primary's host a replica of the new one (an `up` after a failover does not undo it)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from installer.ansible import render
from installer.bundle.manifest import Manifest
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from installer.tls import ca
from service.redis_connect import Endpoint, TLSFiles, sync_client
from tests.support import REPO
from tests.support.loopback import free_port, stop
from tests.support.redis_sentinel import sentinels_ready

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROLE = REPO / "playbooks/roles/redis"
HOSTS = {"h1": "127.0.0.1", "h2": "127.0.0.2", "h3": "127.0.0.3"}
_PLAY = """
- hosts: all
  gather_facts: false
  vars_files: [{defaults}]
  tasks:
    - ansible.builtin.include_tasks: {role}/tasks/primary.yml
    - ansible.builtin.file: {{path: "{out}/{{{{ inventory_hostname }}}}", state: directory, mode: "0700"}}
    - ansible.builtin.template:
        src: {role}/templates/redis.conf.j2
        dest: "{out}/{{{{ inventory_hostname }}}}/redis.conf"
        mode: "0600"
      when: inventory_hostname == redis_host or inventory_hostname in redis_replica_hosts
    - ansible.builtin.template:
        src: {role}/templates/sentinel.conf.j2
        dest: "{out}/{{{{ inventory_hostname }}}}/sentinel.conf"
        mode: "0600"
"""


def _render(tmp_path: Path, wanted: dict[str, Any], round_: int) -> Path:
    out = tmp_path / f"rendered-{round_}"
    play = tmp_path / "play.yml"
    play.write_text(_PLAY.format(defaults=ROLE / "defaults/main.yml", role=ROLE, out=out))
    inventory = {"all": {"hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
               "pli_tls_dir": str(tmp_path / name / "tls")} for name in HOSTS}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "vars.json").write_text(json.dumps(wanted))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
         "-e", f"@{tmp_path / 'vars.json'}", str(play)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out


def _start(argv: list[str], workdir: Path) -> subprocess.Popen[bytes]:
    """Its log (stdout: logfile "") in workdir/log, which a failed test prints."""
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir / "log").open("wb") as log:
        return subprocess.Popen([*argv, "--dir", str(workdir)], stdout=log, stderr=subprocess.STDOUT)


def _logs(root: Path) -> str:
    return "\n".join(f"--- {p.parent.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-25:])
                     for p in sorted(root.glob("*/log")))


def _until(check: Any, timeout: float, what: str, detail: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        assert time.monotonic() < deadline, f"{what}\n{detail()}"
        time.sleep(0.1)


def test_the_role_renders_a_replica_and_sentinels_that_fail_over_and_converge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    authority = ca.create_ca("it")
    for name, address in HOSTS.items():
        tls = tmp_path / name / "tls"
        tls.mkdir(parents=True)
        issued = ca.issue_server(authority, name, [name], [address], 30)
        (tls / "ca.pem").write_bytes(authority.cert_pem)
        (tls / "server.pem").write_bytes(issued.cert_pem)
        (tls / "server.key").write_bytes(issued.key_pem)
        (tls / "server.key").chmod(0o600)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    port, sentinel_port = free_port(), free_port()
    site.write_text(
        "deployment: ha\nmodel: {path: w, served_name: tiny}\nengine: {device: cpu}\nhosts:\n"
        "  - {name: h1, address: 127.0.0.1}\n  - {name: h2, address: 127.0.0.2}\n"
        "  - {name: h3, address: 127.0.0.3, groups: [monitoring]}\n"
        f"ports: {{redis: {port}, redis_sentinel: {sentinel_port}}}\n"
    )
    inv = load_inventory(site)
    dp = deployment_plan.build(inv)
    secret_files.prepare(dp)
    gv = render.group_vars(dp, Manifest(target={}, components={}, packages=[]))
    assert gv["redis_replica_hosts"] == ["h2"] and gv["redis_sentinel_hosts"] == ["h1", "h2", "h3"]
    assert gv["gateway_redis_sentinels"] == [f"{a}:{sentinel_port}" for a in HOSTS.values()]
    assert all("redis" in h.package_groups for h in dp.hosts)  # the sentinel-only host installs redis-server
    wanted = {k: v for k, v in gv.items() if k.startswith("redis_")}
    password = Path(gv["redis_password_file"]).read_text()

    out = _render(tmp_path, wanted, 1)
    h1, h2 = (out / "h1/redis.conf").read_text(), (out / "h2/redis.conf").read_text()
    assert "replicaof" not in h1 and f"replicaof 127.0.0.1 {port}" in h2
    assert "tls-replication yes" in h2 and "masterauth" in h2
    assert f"sentinel monitor pli 127.0.0.1 {port} 2" in (out / "h3/sentinel.conf").read_text()
    assert not (out / "h3/redis.conf").exists()  # the monitoring host runs a sentinel only

    server = "/usr/bin/redis-server"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("h1", "h2"):
            conf = out / name / "redis.conf"
            procs[name] = _start([server, str(conf), "--supervised", "no"], tmp_path / "data" / name)
        for name in HOSTS:
            conf = tmp_path / "data" / f"{name}-sentinel.conf"  # Sentinel rewrites it: a writable copy
            conf.write_text((out / name / "sentinel.conf").read_text())
            conf.chmod(0o600)
            procs[f"s-{name}"] = _start([server, str(conf), "--sentinel"], tmp_path / "data" / f"s-{name}")

        def client(name: str) -> redis.Redis:
            tls = tmp_path / name / "tls"
            return redis.Redis(HOSTS[name], port, password=password, ssl=True, ssl_ca_certs=str(tls / "ca.pem"),
                               ssl_certfile=str(tls / "server.pem"), ssl_keyfile=str(tls / "server.key"),
                               socket_timeout=2)

        _until(lambda: client("h1").info("replication")["connected_slaves"] == 1, 30, "the replica did not sync")
        tls1 = tmp_path / "h1" / "tls"
        ep = Endpoint(f"rediss://:{password}@127.0.0.1:{port}/0",
                      tuple((a, sentinel_port) for a in HOSTS.values()), "pli",
                      TLSFiles(str(tls1 / "ca.pem"), str(tls1 / "server.pem"), str(tls1 / "server.key")))
        through = sync_client(ep, 2)
        _until(lambda: through.set("pli:test", "1") and through.wait(1, 1000) == 1, 30, "no write reached the replica")
        watchers = through.connection_pool.sentinel_manager.sentinels
        _until(lambda: sentinels_ready(watchers, port), 40, "the sentinels did not find each other and the replica",
               lambda: _logs(tmp_path / "data"))

        killed = time.monotonic()
        os.kill(procs["h1"].pid, signal.SIGKILL)
        _until(lambda: through.connection_pool.get_master_address() == ("127.0.0.2", port), 30,
               "the sentinels did not promote the replica", lambda: _logs(tmp_path / "data"))
        promoted = time.monotonic() - killed
        assert sync_client(ep, 2).get("pli:test") == b"1"
        print(f"\nsentinels promoted h2 {promoted:.2f} s after h1's primary was SIGKILLed")

        again = _render(tmp_path, wanted, 2)  # `up` after the failover: asks the sentinels
        assert f"replicaof 127.0.0.2 {port}" in (again / "h1/redis.conf").read_text()
        assert "replicaof" not in (again / "h2/redis.conf").read_text()
    finally:
        for proc in procs.values():
            stop(proc)
