"""Ray's ports kept to the cluster's hosts by real nftables (installer/gpu/ray_firewall.py, #36).

Four network namespaces on a bridge of their own (in a fifth, so nothing touches this machine's
own network) stand for a Ray head, a Ray worker, the monitoring host and a host outside the
cluster. Plain TCP listeners in the head and the worker hold Ray's pinned ports (and an engine's
port beside them); the rules the plan writes for each are loaded with `nft -f`, as the
private-llm-ray-firewall unit loads them. Then: the members connect, the outsider is refused on
every Ray port and still reaches the engine's, the monitoring host reaches only the head's
autoscaler metrics; a member taken out by a second `nft -f` is refused at once; deleting the
table (the unit's stop, `installer down`) opens the ports again. Root only (namespaces)."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from installer.gpu import ray_firewall, ray_ports

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(60),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]
NFT = shutil.which("nft") or "/usr/sbin/nft"
ENGINE_PORT = 8000  # not Ray's: the rules must leave it alone
HEAD_PORTS = [ray_ports.GCS_PORT, ray_ports.METRICS_EXPORT_PORT, ray_ports.CLIENT_SERVER_PORT,
              ray_ports.MAX_WORKER_PORT, ray_ports.AUTOSCALER_METRIC_PORT]
WORKER_PORTS = [ray_ports.NODE_MANAGER_PORT, ray_ports.MIN_WORKER_PORT]
# Listens on every address, as Ray's GCS and raylet do, until killed; no accept(): the kernel
# completes the handshake, which is all a probe needs.
LISTEN = ("import socket, sys, time\n"
          "held = []\n"
          "for p in sys.argv[1:]:\n"
          "    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
          "    s.bind(('::', int(p))); s.listen(64); held.append(s)\n"
          "print('ready', flush=True); time.sleep(120)\n")
PROBE = ("import json, socket, sys\n"
         "out = {}\n"
         "for target in sys.argv[1:]:\n"
         "    host, port = target.rsplit(':', 1); host = host.strip('[]')\n"
         "    try:\n"
         "        socket.create_connection((host, int(port)), timeout=2).close(); out[target] = 'open'\n"
         "    except ConnectionRefusedError: out[target] = 'refused'\n"
         "    except OSError as e: out[target] = type(e).__name__\n"
         "print(json.dumps(out))\n")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _in(ns: str, *argv: str, stdin: str | None = None) -> str:
    r = subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"{argv[0]} in {ns}: {r.stderr}"
    return r.stdout


@dataclass
class Net:
    ns: dict[str, str]  # role: namespace
    addr: dict[str, str]  # role: IPv4 address
    addr6: dict[str, str]  # role: IPv6 address

    def probe(self, source: str, *targets: tuple[str, int], v6: bool = False) -> dict[tuple[str, int], str]:
        addr = {r: f"[{a}]" for r, a in self.addr6.items()} if v6 else self.addr
        out = json.loads(_in(self.ns[source], sys.executable, "-c", PROBE,
                             *(f"{addr[role]}:{port}" for role, port in targets)))
        return {(role, port): out[f"{addr[role]}:{port}"] for role, port in targets}

    def load(self, role: str, text: str) -> None:
        _in(self.ns[role], NFT, "-f", "-", stdin=text)


@pytest.fixture
def net() -> Iterator[Net]:
    assert os.path.exists(NFT), "nft is not installed: run .ci/setup (Debian package nftables)"
    tag = f"rf{os.getpid() % 10000}"
    roles = ["head", "worker", "mon", "outsider"]
    n = Net({r: f"{tag}{r[:3]}" for r in roles}, {r: f"10.36.36.{i + 2}" for i, r in enumerate(roles)},
            {r: f"fd36::{i + 2}" for i, r in enumerate(roles)})
    hub = f"{tag}hub"
    made: list[str] = []
    listeners: list[subprocess.Popen[str]] = []
    try:
        for ns in [hub, *n.ns.values()]:
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, role in enumerate(roles):
            ns = n.ns[role]
            _ip("link", "add", f"{tag}v{i}", "netns", hub, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", hub, "link", "set", f"{tag}v{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{n.addr[role]}/24", "dev", "eth0")
            _ip("-n", ns, "addr", "add", f"{n.addr6[role]}/64", "dev", "eth0", "nodad")  # usable at once
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        for role, ports in (("head", [*HEAD_PORTS, ENGINE_PORT]), ("worker", [*WORKER_PORTS, ENGINE_PORT])):
            p = subprocess.Popen(["ip", "netns", "exec", n.ns[role], sys.executable, "-c", LISTEN, *map(str, ports)],
                                 stdout=subprocess.PIPE, text=True)
            listeners.append(p)
            assert p.stdout and p.stdout.readline().strip() == "ready"
        yield n
    finally:
        for p in listeners:
            p.kill()
            p.wait()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_only_the_clusters_hosts_reach_rays_ports(net: Net, tmp_path: Path) -> None:
    # the worker a member by both its addresses, so Ray's ports are guarded over IPv6 as well
    members = [net.addr["head"], net.addr["worker"], net.addr6["worker"]]
    every_head = [("head", p) for p in [*HEAD_PORTS, ENGINE_PORT]]
    # before the rules, the outsider reaches everything: a refusal below is the firewall's
    assert set(net.probe("outsider", *every_head).values()) == {"open"}

    head_rules = ray_firewall.ruleset("head", members, [net.addr["mon"]])
    (tmp_path / "head.nft").write_text(head_rules)
    _in(net.ns["head"], NFT, "-c", "-f", str(tmp_path / "head.nft"))  # the role's `validate:`
    net.load("head", head_rules)
    net.load("head", head_rules)  # applied again (every `up`): replaced, not doubled
    net.load("worker", ray_firewall.ruleset("worker", members, [net.addr["mon"]]))
    assert _in(net.ns["head"], NFT, "list", "tables").split() == ["table", "inet", "pli_ray"]

    ray_head = [("head", p) for p in HEAD_PORTS if p != ray_ports.AUTOSCALER_METRIC_PORT]
    metrics, gcs = ("head", ray_ports.AUTOSCALER_METRIC_PORT), ("head", ray_ports.GCS_PORT)
    assert net.probe("worker", *ray_head, metrics, ("head", ENGINE_PORT)) == {
        **{t: "open" for t in ray_head}, metrics: "refused", ("head", ENGINE_PORT): "open"}
    assert net.probe("head", *(("worker", p) for p in WORKER_PORTS)) == {("worker", p): "open" for p in WORKER_PORTS}
    # the head's own processes reach it at its own address (loopback)
    assert set(net.probe("head", *ray_head).values()) == {"open"}
    assert net.probe("mon", metrics, gcs) == {metrics: "open", gcs: "refused"}
    outsider = net.probe("outsider", *every_head, *(("worker", p) for p in WORKER_PORTS), ("worker", ENGINE_PORT))
    assert outsider == {**{t: "refused" for t in every_head}, ("head", ENGINE_PORT): "open",
                        **{("worker", p): "refused" for p in WORKER_PORTS}, ("worker", ENGINE_PORT): "open"}
    # over IPv6 (Ray listens on every address): the member in, the others out, the engine port open
    assert net.probe("worker", gcs, v6=True) == {gcs: "open"}
    assert net.probe("outsider", gcs, ("head", ENGINE_PORT), v6=True) == {gcs: "refused", ("head", ENGINE_PORT): "open"}
    assert net.probe("mon", metrics, v6=True) == {metrics: "refused"}  # a scraper by its IPv4 address only
    listed = _in(net.ns["head"], NFT, "list", "table", "inet", "pli_ray")
    assert "counter packets 0 " not in listed, listed  # the refusals were counted

    # the worker leaves the group: one `nft -f` shuts it out
    net.load("head", ray_firewall.ruleset("head", [net.addr["head"]], [net.addr["mon"]]))
    assert net.probe("worker", ("head", ray_ports.GCS_PORT)) == {("head", ray_ports.GCS_PORT): "refused"}

    # the unit's ExecStop (installer down): the table goes, the ports answer everyone again
    _in(net.ns["head"], NFT, "delete", "table", "inet", ray_firewall.TABLE)
    assert _in(net.ns["head"], NFT, "list", "tables").strip() == ""
    assert set(net.probe("outsider", *every_head).values()) == {"open"}


def test_the_status_probe_tells_the_table_from_the_unit(tmp_path: Path) -> None:
    """installer status's TABLE_PROBE (installer/status/ray.py) against real nftables in a
    namespace of its own: present once the rules are loaded, absent after an outside `nft flush
    ruleset` (which a oneshot unit's "active" does not show), empty after `nft flush table`."""
    from installer.status.ray import TABLE_PROBE

    assert os.path.exists(NFT), "nft is not installed: run .ci/setup (Debian package nftables)"
    ns = f"rf{os.getpid() % 10000}st"
    _ip("netns", "add", ns)
    try:
        def probe() -> str:
            return _in(ns, "sh", "-c", TABLE_PROBE).strip()

        assert probe() == "table=absent"
        _in(ns, NFT, "-f", "-", stdin=ray_firewall.ruleset("worker", ["10.36.37.2", "10.36.37.3"]))
        assert probe() == "table=present"
        _in(ns, NFT, "flush", "table", "inet", ray_firewall.TABLE)
        assert probe() == "table=empty"
        _in(ns, NFT, "-f", "-", stdin=ray_firewall.ruleset("worker", ["10.36.37.2", "10.36.37.3"]))
        _in(ns, NFT, "flush", "ruleset")
        assert probe() == "table=absent"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
