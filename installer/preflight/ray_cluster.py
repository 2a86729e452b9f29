"""Ray preflight: before any host changes, the hosts of a model spanning hosts can form its cluster.

Run once the deployment's plan is laid out (installer/preparation/prepare.py, after the per-host
preflight), over the same SSH layer as the other fan-outs (installer/hosts/remote.py):

1. Each Ray host lists its listening TCP ports (/proc/net/tcp and tcp6: no ss or netstat
   needed). A port of Ray's (installer/gpu/ray_ports.py) held by something else is refused:
   Ray would fail to start there, or start on a port its peers do not expect. When the host's
   `private-llm-ray` unit is already active (a redeploy), its listeners are Ray's own.
2. Every worker host connects to the head's GCS port at the head's inventory address, the
   way `ray start --address` will. On a first deploy nothing listens there yet, so the head
   opens a short-lived listener on that address and port for the check (it accepts the
   workers' connections and exits within LISTEN_S); a connection refused, timed out or
   unroutable is refused before anything is installed, naming the worker, the head's
   address and port, and the ports a firewall between them must let through. A worker the
   head's own Ray firewall (installer/gpu/ray_firewall.py, from the deployment before) does not
   name yet is not dialled: that table refuses it until `up` writes the new members, before Ray
   restarts, so the refusal would say nothing about the network.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Protocol

from installer.base.errors import PreflightError
from installer.gpu import ray_firewall, ray_ports
from installer.hosts import remote
from installer.hosts.ssh import Target, target
from installer.inventory import Inventory

LISTEN_S = 20
CONNECT_S = 5

# `active=<unit state>` and `listen=<hex ports>` (LISTEN is state 0A in /proc/net/tcp*).
PROBE = (
    f"echo active=$(systemctl is-active {ray_ports.UNIT} 2>/dev/null); "
    "echo listen=$(awk 'FNR>1 && $4==\"0A\" {n=split($2,a,\":\"); print a[n]}' "
    "/proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u | tr '\\n' ' '); "
    # the members our Ray firewall lets in (the rules file is world-readable; no root needed)
    f"if [ -r {ray_firewall.RULES_PATH} ]; then echo firewall=$(sed -n "
    "'/set members_v/,/}/s/.*elements = {\\(.*\\)}/\\1/p' "
    f"{ray_firewall.RULES_PATH} | tr ',\\n' '  '); fi"
)

# Binds the head's address and GCS port, returns once bound (the parent exits, so SSH ends),
# and the child accepts the workers' connections until they all came or LISTEN_S passed.
LISTENER = """
import os, socket, sys, time
addr, port, want, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(16)
if os.fork():
    print("listening")
    sys.exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
end = time.time() + secs
while want > 0 and time.time() < end:
    s.settimeout(max(0.1, end - time.time()))
    try:
        c, _ = s.accept()
    except OSError:
        break
    c.close()
    want -= 1
"""

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    print(exc.strerror or exc, file=sys.stderr)
    sys.exit(1)
"""

RunOne = Callable[..., remote.Result]


class RayNode(Protocol):
    """What this check reads of installer/planning/engines.py's RayNode (engines imports this module's
    sibling ray_checks, so the type is described here rather than imported)."""

    role: str
    node_ip: str


def _python(code: str, *args: object) -> str:
    return "python3 -c " + shlex.quote(code) + "".join(" " + shlex.quote(str(a)) for a in args)


def parse(text: str) -> tuple[bool, set[int]]:
    """(the Ray unit is active, the listening ports) from PROBE's output."""
    facts = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    ports = {int(p, 16) for p in facts.get("listen", "").split() if p.strip()}
    return facts.get("active", "").strip() == "active", ports


def firewall_members(text: str) -> set[str] | None:
    """The addresses the host's Ray firewall lets in, from PROBE's output; None without one."""
    for line in text.splitlines():
        if line.startswith("firewall="):
            return set(line.split("=", 1)[1].split())
    return None


def taken(role: str, listening: set[int], active: bool) -> list[str]:
    """One line per Ray port of a node of `role` that something other than Ray holds."""
    if active:
        return []
    problems = []
    for p in ray_ports.ports(role):
        busy = sorted(port for port in listening if port in p)
        if not busy:
            continue
        shown = ", ".join(map(str, busy[:5])) + (f" and {len(busy) - 5} more" if len(busy) > 5 else "")
        problems.append(
            f"{'ports' if len(busy) > 1 else 'port'} {shown} of {p.what} ({p.text}) "
            f"{'are' if len(busy) > 1 else 'is'} already in use; find the process with "
            f"`ss -ltnp 'sport = :{busy[0]}'` and stop or move it: Ray's ports are fixed "
            "(installer/gpu/ray_ports.py, docs/multinode.md)"
        )
    return problems


def _members(inv: Inventory, nodes: Sequence[tuple[str, RayNode]]) -> list[tuple[Target, RayNode]]:
    hosts = {h.name: h for h in inv.hosts}
    return [(target(inv, hosts[name]), node) for name, node in nodes]


def problems(inv: Inventory, nodes: Sequence[tuple[str, RayNode]], run_one: RunOne | None = None) -> list[str]:
    """`host (address): problem` lines for the Ray cluster of (host name, its RayNode); [] when
    it can form. `run_one` (default remote.run_one) is the SSH edge, stood in by the tests."""
    run = run_one or remote.run_one
    members = _members(inv, nodes)
    if not members:
        return []
    found: list[str] = []
    probes = remote.each(members, lambda m: run(m[0], PROBE))
    state: dict[str, tuple[bool, set[int]]] = {}
    allowed: dict[str, set[str] | None] = {}
    for (t, node), r in zip(members, probes, strict=True):
        if not r.ok:
            found.append(f"{t.name} ({t.address}): the Ray port probe failed: {r.why}")
            continue
        active, listening = state[t.name] = parse(r.text)
        allowed[t.name] = firewall_members(r.text)
        found += [f"{t.name} ({t.address}): {line}" for line in taken(node.role, listening, active)]
    if found:
        return found
    head = next((t, n) for t, n in members if n.role == "head")
    head_t, head_node = head
    shut = allowed[head_t.name]  # a new worker is let in by `up`, not yet: not dialled (docstring)
    workers = [t for t, n in members if n.role == "worker" and (shut is None or n.node_ip in shut)]
    if not workers:
        return []
    address, port = head_node.node_ip, ray_ports.GCS_PORT
    active, listening = state[head_t.name]
    if not (active and port in listening):  # first deploy: nothing listens yet, open it for the check
        opened = run(head_t, _python(LISTENER, address, port, len(workers), LISTEN_S))
        if not opened.ok:
            return [f"{head_t.name} ({head_t.address}): could not listen on {address}:{port} to check that "
                    f"the Ray workers reach it: {opened.why}"]
    fix = (f"open TCP {ray_ports.firewall_text()} between the hosts of the Ray cluster (firewall, security "
           "group), or give the hosts addresses on one network")
    results = remote.each(workers, lambda t: run(t, _python(CONNECT, address, port, CONNECT_S)))
    for t, r in zip(workers, results, strict=True):
        if not r.ok:
            found.append(
                f"{t.name} ({t.address}): cannot reach the Ray head {head_t.name} at {address}:{port} "
                f"({r.why}), where `ray start --address` joins it; {fix}"
            )
    return found


def check(inv: Inventory, nodes: Sequence[tuple[str, RayNode]], run_one: RunOne | None = None) -> None:
    """Refuse (PreflightError) a Ray cluster that cannot form, before any host changes."""
    found = problems(inv, nodes, run_one)
    if found:
        raise PreflightError(
            f"the Ray cluster of the model spanning hosts cannot form ({len(found)} problem(s)); "
            "no host was changed",
            found,
        )
