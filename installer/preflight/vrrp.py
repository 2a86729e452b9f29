"""VRRP preflight: before any host changes, no other VRRP router on the gateway hosts' link uses
the frontend's router id (docs/ha.md#one-address-for-clients).

Two VRRP groups with one id on one link fight over who is master, and a foreign master with our
id makes our hosts give up the VIP or hold it beside it. The inventory cannot show that, so each
gateway host listens for LISTEN_S seconds, over the one SSH fan-out (installer/hosts/remote.py), for
VRRP adverts (IP protocol 112; multicast 224.0.0.18 joined on the interface of its own address,
and any unicast sent to it). An advert with our id from an address that is none of our gateway
hosts is refused, naming its sender. Our own hosts' adverts (a redeploy) are ours.

A VRRP router that sends only unicast to other machines is not heard here: its peers alone see
it. Routers advertise at least every few seconds (keepalived's default: 1 s; RFC 5798 allows up
to 40 s), so a silent or slower one can pass; docs/ha.md says so.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from installer.base.errors import PreflightError
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Inventory
from installer.inventory.topology import serving_hosts

LISTEN_S = 3.0

# Run as root with the host's python3: argv[1] the host's own address, argv[2] seconds. Prints
# one "SOURCE VRID" line per VRRP advert heard (v2 or v3: the id is the advert's second byte).
LISTENER = r"""
import select, socket, struct, sys, time
own, seconds = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 112)
try:
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton("224.0.0.18") + socket.inet_aton(own))
except OSError as exc:
    print("nomembership", exc, file=sys.stderr)
end = time.monotonic() + seconds
while True:
    left = end - time.monotonic()
    if left <= 0 or not select.select([s], [], [], left)[0]:
        break
    packet, (source, _) = s.recvfrom(2048)
    header = (packet[0] & 0x0F) * 4
    if len(packet) > header + 1:
        print(source, packet[header + 1], flush=True)
"""

RunOne = Callable[..., remote.Result]


def parse(text: str) -> set[tuple[str, int]]:
    """{(sender, router id)} from LISTENER's output."""
    found: set[tuple[str, int]] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            found.add((parts[0], int(parts[1])))
    return found


def foreign(heard: set[tuple[str, int]], router_id: int, ours: set[str]) -> list[str]:
    """The senders other than our own hosts that advertise our router id."""
    return sorted({source for source, vrid in heard if vrid == router_id and source not in ours})


def problems(inv: Inventory, run_one: RunOne | None = None, seconds: float = LISTEN_S) -> list[str]:
    """`host (address): problem` lines; [] when the router id is free on every gateway host's link."""
    fe = inv.frontend
    if fe is None or inv.provider != "baremetal":
        return []
    run = run_one or remote.run_one
    gateways = serving_hosts(inv)
    ours = {h.address for h in gateways}
    command = lambda address: "python3 -c " + shlex.quote(LISTENER) + f" {shlex.quote(address)} {seconds}"  # noqa: E731
    results = remote.each(gateways, lambda h: run(target(inv, h), command(h.address), timeout=seconds + 30))
    found: list[str] = []
    for host, r in zip(gateways, results, strict=True):
        if not r.ok:
            found.append(f"{host.name} ({host.address}): could not listen for VRRP adverts: {r.why}")
            continue
        for source in foreign(parse(r.text), fe.router_id, ours):
            found.append(
                f"{host.name} ({host.address}): {source}, which is none of this deployment's gateway hosts, "
                f"advertises VRRP router id {fe.router_id} on this link; pick a frontend.router_id no other "
                f"VRRP group uses ({inv.where('frontend', 'router_id')}), or stop that router"
            )
    return found


def check(inv: Inventory, run_one: RunOne | None = None) -> None:
    """Refuse (PreflightError) a frontend router id that another VRRP router already uses."""
    found = problems(inv, run_one)
    if found:
        raise PreflightError(
            f"the frontend's VRRP router id is not free ({len(found)} problem(s)); no host was changed", found
        )


def heard_in(run: Callable[[Sequence[str]], str], own: str, seconds: float) -> set[tuple[str, int]]:
    """LISTENER run by `run(argv)` (a test runs it in a network namespace): what it heard."""
    return parse(run(["python3", "-c", LISTENER, own, str(seconds)]))
