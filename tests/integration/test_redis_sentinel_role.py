"""redis.replicas through real Ansible and real Redis (#37 item 2): an inventory of two serving
hosts and a monitoring host (127.0.0.1-3 on loopback) is planned and rendered; the redis role's
primary lookup, templates and Sentinel configuration tasks give each host its redis.conf and
sentinel.conf; run as real redis-server and Sentinel processes (TLS, password) they replicate;
after the primary is SIGKILLed the sentinels promote the replica, and rendering again asks the
sentinels and makes the old primary's host a replica of the new one (an `up` after a failover
does not undo it), leaving Sentinel's own file alone. Then, on the same processes (review):
- a changed installer setting (the sentinel port, down-after-milliseconds) reaches the running
  sentinels: they are asked on their old port, get a new file with the current primary and their
  own id, and after a restart run with the new settings;
- one sentinel naming a stale primary is outvoted by the majority;
- with that one and a stopped sentinel there is no majority, and the render stops, naming each
  sentinel's answer."""

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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

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
    # what tasks/sentinel.yml does around systemd: the test moves `.next` in and restarts
    - ansible.builtin.include_tasks: {role}/tasks/sentinel_config.yml
    - ansible.builtin.template:
        src: {role}/templates/sentinel.conf.j2
        dest: "{{{{ redis_sentinel_settings_file }}}}"
        mode: "0600"
      vars: {{__sentinel_part: settings}}
"""



def _playbook(tmp_path: Path, text: str, wanted: dict[str, Any], out: Path) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(text.format(defaults=ROLE / "defaults/main.yml", role=ROLE, out=out))
    if not (tmp_path / "templates").exists():  # where a task file included outside its role finds them
        (tmp_path / "templates").symlink_to(ROLE / "templates")
    inventory = {"all": {"hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
               "pli_tls_dir": str(tmp_path / name / "tls")} for name in HOSTS}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    # The files Sentinel runs on and the settings record, per host in the test's folders (extra
    # vars: above the role defaults the play loads)
    paths = {"redis_sentinel_conf_file": f"{tmp_path}/data/{{{{ inventory_hostname }}}}-sentinel.conf",
             "redis_sentinel_settings_file": f"{tmp_path}/{{{{ inventory_hostname }}}}/sentinel.installer.conf"}
    (tmp_path / "vars.json").write_text(json.dumps({**wanted, **paths}))
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
         "-e", f"@{tmp_path / 'vars.json'}", str(play)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")},
    )


def _render(tmp_path: Path, wanted: dict[str, Any], round_: int) -> Path:
    """`up`'s redis role on the three hosts: redis.conf under rendered-N/, Sentinel's next file
    beside its live one when the settings changed, and the settings recorded (the role records
    them once the sentinel runs on the new file; the test moves it in right after)."""
    out = tmp_path / f"rendered-{round_}"
    (tmp_path / "data").mkdir(exist_ok=True)
    proc = _playbook(tmp_path, _PLAY, wanted, out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out


def _next_in_place(tmp_path: Path) -> list[str]:
    """Move each host's rendered `.next` onto Sentinel's file (tasks/sentinel.yml, with the
    sentinel stopped); the hosts that had one."""
    moved = []
    for name in HOSTS:
        nxt = tmp_path / "data" / f"{name}-sentinel.conf.next"
        if nxt.exists():
            nxt.replace(tmp_path / "data" / f"{name}-sentinel.conf")
            moved.append(name)
    return moved


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
    data = tmp_path / "data"
    assert _next_in_place(tmp_path) == list(HOSTS)  # no sentinel ran: every host gets its first file
    assert f"sentinel monitor pli 127.0.0.1 {port} 2" in (data / "h3-sentinel.conf").read_text()
    assert not (out / "h3/redis.conf").exists()  # the monitoring host runs a sentinel only

    server = "/usr/bin/redis-server"
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start_sentinel(name: str) -> None:
        procs[f"s-{name}"] = _start([server, str(data / f"{name}-sentinel.conf"), "--sentinel"], data / f"s-{name}")

    def sentinel(name: str, at: int) -> redis.Redis:
        tls = tmp_path / name / "tls"
        return redis.Redis(HOSTS[name], at, password=password, ssl=True, ssl_ca_certs=str(tls / "ca.pem"),
                           ssl_certfile=str(tls / "server.pem"), ssl_keyfile=str(tls / "server.key"),
                           socket_timeout=2, decode_responses=True)

    try:
        for name in ("h1", "h2"):
            conf = out / name / "redis.conf"
            procs[name] = _start([server, str(conf), "--supervised", "no"], data / name)
        for name in HOSTS:
            start_sentinel(name)

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
               lambda: _logs(data))
        ids = {name: sentinel(name, sentinel_port).execute_command("SENTINEL", "MYID") for name in HOSTS}

        killed = time.monotonic()
        os.kill(procs["h1"].pid, signal.SIGKILL)
        _until(lambda: through.connection_pool.get_master_address() == ("127.0.0.2", port), 30,
               "the sentinels did not promote the replica", lambda: _logs(data))
        promoted = time.monotonic() - killed
        assert sync_client(ep, 2).get("pli:test") == b"1"
        print(f"\nsentinels promoted h2 {promoted:.2f} s after h1's primary was SIGKILLed")

        again = _render(tmp_path, wanted, 2)  # `up` after the failover: asks the sentinels
        assert f"replicaof 127.0.0.2 {port}" in (again / "h1/redis.conf").read_text()
        assert "replicaof" not in (again / "h2/redis.conf").read_text()
        assert _next_in_place(tmp_path) == []  # same settings: Sentinel's own file stays its own
        assert "known-sentinel" in (data / "h3-sentinel.conf").read_text()

        # A changed setting reaches the running sentinels: asked on their old port, each gets a
        # file with the new port and timing, the primary they agree on, and its own id.
        new_port = free_port()
        changed = {**wanted, "redis_sentinel_port": new_port, "redis_sentinel_down_after_ms": 3000}
        third = _render(tmp_path, changed, 3)
        assert f"replicaof 127.0.0.2 {port}" in (third / "h1/redis.conf").read_text()
        for name in HOSTS:
            stop(procs.pop(f"s-{name}"))  # tasks/sentinel.yml: stop, move the file in, start
        assert _next_in_place(tmp_path) == list(HOSTS)
        for name in HOSTS:
            text = (data / f"{name}-sentinel.conf").read_text()
            assert f"tls-port {new_port}" in text and f"sentinel monitor pli 127.0.0.2 {port} 2" in text
            assert f"sentinel myid {ids[name]}" in text
            start_sentinel(name)

        def runs_new_settings(name: str) -> bool:
            s = sentinel(name, new_port)
            master = s.execute_command("SENTINEL", "MASTER", "pli")
            fields = dict(zip(master[::2], master[1::2], strict=True)) if isinstance(master, list) else master
            return (fields["ip"] == "127.0.0.2" and fields["down-after-milliseconds"] == "3000"
                    and int(fields["num-other-sentinels"]) == 2 and s.execute_command("SENTINEL", "MYID") == ids[name])

        _until(lambda: all(runs_new_settings(n) for n in HOSTS), 40,
               "the sentinels did not come back on the new settings and find each other", lambda: _logs(data))

        # One sentinel naming a stale primary (h1's, cut off during the failover) is outvoted;
        # taking the first answer, as the role did, made h1 a primary again. The settings were
        # recorded: no sentinel gets a new file (converged).
        stale = sentinel("h1", new_port)
        stale.execute_command("SENTINEL", "REMOVE", "pli")
        stale.execute_command("SENTINEL", "MONITOR", "pli", "127.0.0.1", port, 2)
        stale.execute_command("SENTINEL", "SET", "pli", "auth-pass", password)
        assert stale.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "pli")[0] == "127.0.0.1"
        outvoted = _render(tmp_path, changed, 4)
        assert _next_in_place(tmp_path) == []
        assert f"replicaof 127.0.0.2 {port}" in (outvoted / "h1/redis.conf").read_text()
        assert "replicaof" not in (outvoted / "h2/redis.conf").read_text()

        # With h3's sentinel stopped too, no address has a majority: the render stops and says why.
        stop(procs.pop("s-h3"))
        refused = _playbook(tmp_path, _PLAY, changed, tmp_path / "rendered-5")
        text = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "no majority (2 of 3)" in text, text[-3000:]
        assert "h1: 127.0.0.1" in text and "h2: 127.0.0.2" in text and "h3: not running" in text, text[-3000:]
        assert not (tmp_path / "rendered-5" / "h1" / "redis.conf").exists()  # stopped before any change

        # Every sentinel stopped (hosts rebooted) after they were configured: not a first `up`, so
        # the inventory's first host (h1, demoted) is not taken; rendering it would resync h2 from
        # it and lose what was written since (review). Refused, naming each sentinel.
        stop(procs.pop("s-h1"))
        stop(procs.pop("s-h2"))
        none = _playbook(tmp_path, _PLAY, changed, tmp_path / "rendered-6")
        text = none.stdout + none.stderr
        assert none.returncode != 0 and "no majority (2 of 3)" in text, text[-3000:]
        assert all(f"{h}: not running" in text for h in ("h1", "h2", "h3")), text[-3000:]
        assert not (tmp_path / "rendered-6" / "h1" / "redis.conf").exists()
    finally:
        for proc in procs.values():
            stop(proc)
