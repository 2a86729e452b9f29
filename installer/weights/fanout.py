"""The weights fan-out, control machine's side: who fetches from whom, what each host tries when
its source dies, the serving side's transient unit, and the progress display's bottleneck.

The shape: the control machine feeds ONE host (the seed), so its link carries the weights
once; every other host hangs under an earlier host, each feeding at most `degree` others. A
host serves each file as soon as it has verified it (weights/serve.py), so the levels overlap
by file instead of waiting for whole copies. A fetcher's sources are its parent, then the
parent's ancestors, then every other host earlier in the order, then the control machine:
only EARLIER hosts, so no two hosts ever wait on each other, and a host that dies is skipped
by its children without anyone deciding anything (verify.py fetch fails over, resuming).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from installer.weights import serve

CONTROL = "control"  # the control machine, the fan-out's root
FANOUT_PORT = serve.PORT  # serve.py's port on each host while a fan-out runs
SERVE_UNIT = "private-llm-weights-serve"
WAIT_S = 600  # verify.py fetch --wait-s: how long a fetch waits on a file its source has not verified yet


@dataclass(frozen=True)
class Plan:
    order: tuple[str, ...]  # hosts in the order they are fed (the seed first)
    parent: dict[str, str]  # host -> the host (or CONTROL) it fetches from first

    def children(self, node: str) -> list[str]:
        return [h for h in self.order if self.parent[h] == node]

    def depth(self, host: str) -> int:
        d = 0
        while host != CONTROL:
            host, d = self.parent[host], d + 1
        return d


def plan(hosts: list[str], degree: int = 1) -> Plan:
    """The seed under the control machine, then breadth first: each host feeds up to `degree`
    later hosts. degree 1, the default, is a chain: every uplink carries the weights once, and
    because hosts serve each file once verified, each level adds about two files' time, not a
    whole copy (measured faster than degree 2 with equal links, docs/weights.md). A larger
    degree shortens the path and splits a host's uplink between its children."""
    if degree < 1:
        raise ValueError(f"fan-out degree {degree}: each host must feed at least one other")
    if len(set(hosts)) != len(hosts) or CONTROL in hosts:
        raise ValueError(f"fan-out hosts must be distinct and none named {CONTROL!r}: {hosts}")
    parent: dict[str, str] = {}
    for i, host in enumerate(hosts):
        parent[host] = CONTROL if i == 0 else hosts[(i - 1) // degree]
    return Plan(tuple(hosts), parent)


def sources(p: Plan, host: str) -> list[str]:
    """Where `host` fetches from, in order: parent, its ancestors, the other earlier hosts (the
    nearest in the order first), the control machine. All earlier than `host`: no cycle."""
    chain: list[str] = []
    node = p.parent[host]
    while node != CONTROL:
        chain.append(node)
        node = p.parent[node]
    earlier = list(reversed(p.order[: p.order.index(host)]))
    return [*chain, *(h for h in earlier if h not in chain), CONTROL]


def replan(p: Plan, dead: set[str]) -> Plan:
    """The plan without `dead` hosts: each orphan hangs under its nearest living ancestor, or
    the control machine (what a fetcher's failover does on its own, made explicit for the next
    run and the display). The order of the living is kept."""
    parent: dict[str, str] = {}
    for host in p.order:
        if host in dead:
            continue
        node = p.parent[host]
        while node in dead:
            node = p.parent[node]
        parent[host] = node
    order = tuple(h for h in p.order if h not in dead)
    if sum(1 for h in order if parent[h] == CONTROL) > 1:
        # the seed died: the first living host becomes the seed, the others hang under it
        seed = order[0]
        parent = {h: (CONTROL if h == seed else (seed if v == CONTROL else v)) for h, v in parent.items()}
    return Plan(order, parent)


@dataclass(frozen=True)
class Link:
    source: str
    host: str
    done: int
    total: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0


def progress_lines(links: list[Link]) -> list[str]:
    """One line per host (bytes, rate, whom from) and the bottleneck: the slowest link still
    moving bytes (or, at the end, the slowest of all), the one that sets the fan-out's time."""
    lines = [
        f"{link.host} <- {link.source}: {link.done / 1e9:.2f} of {link.total / 1e9:.2f} GB, "
        f"{link.rate / 1e6:.0f} MB/s"
        for link in links
    ]
    moving = [link for link in links if link.done < link.total] or links
    if moving:
        slow = min(moving, key=lambda link: link.rate)
        lines.append(f"bottleneck: {slow.source} -> {slow.host} at {slow.rate / 1e6:.0f} MB/s")
    return lines


# The serving units' deadline (systemd's RuntimeMaxSec and serve.py's --deadline-s) is a
# backstop: the model role stops every server once every fetch has ended; the deadline only ends
# one whose run was cut off (the control machine gone, Ctrl-C before the role's `always:`). Too
# short cuts a fetch in progress (it fails, and `up` must run again to resume it); too long
# leaves an idle server up that answers only deployment hosts holding the run's token. So it errs
# long, and grows with the weights (#39: 700 GB at 1 Gbit/s is ~1.6 h of transfer alone).
MIN_DEADLINE_S = 3600  # the fixed hour before #39: a small model's servers never stop sooner than then
SLACK = 2.0  # the estimate doubled: a link may run at half the floor for all of the run and still end
# sha256 on one core, a floor well under old CPUs' rates (docs/weights.md has the measured
# ones): a fetcher verifies its folder whole before it reports success, and a serving host
# hashes each file it has not cached once more.
HASH_MB_S = 250.0
FILES_IN_FLIGHT = 2  # a level of the tree lags its parent by about the files in flight (docs/weights.md)


@dataclass(frozen=True)
class Deadline:
    """The servers' deadline for one fan-out and what it is made of (the plan and the role show it)."""

    total_bytes: int  # every fanned-out weights file, all folders
    largest_bytes: int  # the largest of them: what one level of the tree lags its parent by
    hops: int  # fetch levels below the seed (a chain of N hosts: N - 1)
    min_rate_mb_s: float  # the slowest link rate it allows for (model.fanout_min_rate_mb_s)
    wait_s: int  # how long a fetch waits on a source's 503 (the file not yet verified there)

    @property
    def estimate_s(self) -> float:
        """Seconds at the floor rate: every byte through the slowest link once (the levels move
        in step, by file), each level after the first a few files behind its parent, and every
        byte hashed once more at the end."""
        rate = self.min_rate_mb_s * 1e6
        lag = max(0, self.hops - 1) * FILES_IN_FLIGHT * self.largest_bytes / rate
        return self.total_bytes / rate + lag + self.total_bytes / (HASH_MB_S * 1e6)

    @property
    def seconds(self) -> int:
        return max(MIN_DEADLINE_S, math.ceil(SLACK * self.estimate_s + self.wait_s))

    def describe(self) -> str:
        return (f"weights fan-out: {self.total_bytes / 1e9:.2f} GB over {self.hops} hop(s); its servers stop "
                f"after {self.seconds} s ({self.seconds / 3600:.1f} h) at the latest: {self.estimate_s:.0f} s at "
                f"{self.min_rate_mb_s:g} MB/s (model.fanout_min_rate_mb_s) and {HASH_MB_S:g} MB/s of sha256, "
                f"x{SLACK:g}, + {self.wait_s} s, at least {MIN_DEADLINE_S} s")


# The serving unit's sandbox. systemd gives it a user of its own for its lifetime (DynamicUser:
# no UID owns anything on disk, so it can read only what any user can read, the weights made
# go+r for it, and write only its RuntimeDirectory), hands it the TLS key and the run's token as
# credentials (root's files stay 0600; the unit reads copies only it can open), and lets it
# talk to the fan-out's hosts only (IPAddressDeny/Allow, where the kernel has cgroup BPF).
_SANDBOX = (
    "DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=true", "PrivateTmp=true", "PrivateDevices=true",
    "NoNewPrivileges=true", "CapabilityBoundingSet=", "AmbientCapabilities=", "RestrictSUIDSGID=true",
    "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "RestrictNamespaces=true", "RestrictRealtime=true",
    "LockPersonality=true", "MemoryDenyWriteExecute=true", "ProtectKernelTunables=true",
    "ProtectKernelModules=true", "ProtectKernelLogs=true", "ProtectControlGroups=true", "ProtectClock=true",
    "ProtectHostname=true", "SystemCallArchitectures=native", "SystemCallFilter=@system-service",
    "UMask=0077", "IPAddressDeny=any",
)
CREDENTIALS = "${CREDENTIALS_DIRECTORY}"  # systemd expands it in the command (ExecStart rules)


def _check_run_id(run_id: str) -> None:
    if not run_id or not run_id.replace("-", "").isalnum():
        raise ValueError(f"fan-out run id {run_id!r}: letters, digits and '-' only")


def serve_unit_argv(
    run_id: str, python: str, script: str, server_args: list[str], deadline_s: int,
    credentials: dict[str, str] | None = None, allow: list[str] | None = None,
) -> list[str]:
    """The serving side on a host: a transient unit (`systemd-run`) that the host's own systemd
    stops at the deadline even if the control machine is gone, removed once it ends
    (--collect), run as a user of its own in a read-only sandbox (_SANDBOX). `credentials`
    ({name: root's file}) reach it as ${CREDENTIALS_DIRECTORY}/name; `allow` are the addresses
    it may exchange packets with (the fan-out's hosts)."""
    _check_run_id(run_id)
    unit = f"{SERVE_UNIT}-{run_id}"
    props = [f"RuntimeMaxSec={deadline_s}", *_SANDBOX, f"RuntimeDirectory={unit}"]
    props += [f"IPAddressAllow={' '.join(['localhost', *(allow or [])])}"]
    props += [f"LoadCredential={name}:{path}" for name, path in sorted((credentials or {}).items())]
    return [
        "systemd-run", f"--unit={unit}", "--collect", "--quiet", *(f"--property={p}" for p in props),
        "--", python, "-I", script, *server_args, f"--deadline-s={deadline_s}",
    ]


def serve_unit_command(run_id: str, python: str, script: str, server_args: list[str], deadline_s: int) -> str:
    return shlex.join(serve_unit_argv(run_id, python, script, server_args, deadline_s))


def url(address: str, port: int, prefix: str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"https://{host}:{port}/{prefix}"


def host_runs(
    p: Plan, addresses: dict[str, str], run_id: str, prefixes: list[str], *,
    bundle_dir: str, state_dir: str, port: int = FANOUT_PORT, deadline_s: int = MIN_DEADLINE_S,
    wait_s: int = WAIT_S, limit_mb_s: float = 0.0, python: str = "/usr/bin/python3",
) -> dict[str, dict]:
    """What each host's model role runs for one fan-out (its `model_fanout` variable): the
    serving unit's argv and, but on the seed (the push gave it the weights), one fetch per
    weights folder of the bundle (`prefixes`: model/, models/<dir>/), from its sources in
    order. The TLS files and the token are staged by the role in `<state_dir>/weights/fanout`
    (root's, 0700/0600): the unit gets them as credentials, the fetch reads them as root.
    Nothing secret is in an argv: the token travels in a file."""
    _check_run_id(run_id)
    if not prefixes or any(not x.endswith("/") or x.startswith("/") or ".." in x.split("/") for x in prefixes):
        raise ValueError(f"fan-out folders {prefixes}: relative bundle folders ending in '/'")
    missing = [h for h in p.order if not addresses.get(h)]
    if missing:
        raise ValueError(f"fan-out hosts without a deployment address: {', '.join(missing)}")
    stage = f"{state_dir}/weights/fanout"
    unit = f"{SERVE_UNIT}-{run_id}"
    runs: dict[str, dict] = {}
    for host in p.order:
        server = [
            "--root", bundle_dir, "--manifest", f"{bundle_dir}/manifest.json",
            *(a for x in prefixes for a in ("--under", x)),
            "--bind", addresses[host], f"--port={port}",
            "--cert", f"{CREDENTIALS}/tls.pem", "--key", f"{CREDENTIALS}/tls.key", "--ca", f"{CREDENTIALS}/ca.pem",
            "--token-file", f"{CREDENTIALS}/token", "--stats", f"/run/{unit}/stats.json",
            *([f"--limit-mb-s={limit_mb_s:g}"] if limit_mb_s else []),
        ]
        creds = {"tls.pem": f"{stage}/tls.pem", "tls.key": f"{stage}/tls.key", "ca.pem": f"{stage}/ca.pem",
                 "token": f"{stage}/token"}
        # its own address too: the role's wait_for on the host reaches the server through it
        peers = [addresses[h] for h in p.order]
        fetches = []
        peer_sources = [s for s in sources(p, host) if s != CONTROL]
        for prefix in prefixes if peer_sources else []:
            fetches.append({"prefix": prefix, "argv": [
                python, "-I", f"{state_dir}/weights/verify.py", "fetch",
                "--root", f"{bundle_dir}/{prefix.rstrip('/')}", "--manifest", f"{bundle_dir}/manifest.json",
                "--prefix", prefix, *(a for s in peer_sources for a in ("--url", url(addresses[s], port, prefix))),
                "--ca", f"{stage}/ca.pem", "--cert", f"{stage}/tls.pem", "--key", f"{stage}/tls.key",
                "--token-file", f"{stage}/token", f"--wait-s={wait_s}",
                "--progress", f"{stage}/progress-{prefix.strip('/').replace('/', '--')}.json",
            ]})
        runs[host] = {
            "run": run_id, "unit": unit, "seed": p.parent[host] == CONTROL, "parent": p.parent[host],
            "address": addresses[host], "port": port, "stats": f"/run/{unit}/stats.json", "deadline_s": deadline_s,
            "sources": peer_sources, "stage": stage, "serve_dirs": [f"{bundle_dir}/{x.rstrip('/')}" for x in prefixes],
            "serve_argv": serve_unit_argv(run_id, python, f"{state_dir}/weights/serve.py", server, deadline_s,
                                          creds, peers),
            "fetch": fetches,
        }
    return runs
