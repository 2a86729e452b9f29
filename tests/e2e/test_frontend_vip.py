"""The frontend's virtual IP through the real product path (#37): the lab inventory carries a
`frontend:` section (tests/support/lab_frontend.py), so the first `installer up` installed
keepalived from the bundle on both lab hosts. Under light load through the VIP, the holder's
gateway is stopped, socket and service (its drain turns /readyz to 503; with the socket left
listening, the next connection, keepalived's own check among them, starts it again at once, a
restart the VIP may sit out): the VIP must move to the other host and
requests through it succeed again within a bound; then the gateway is started again and the VIP
stays where it went (nopreempt)."""

import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from installer.inventory import load_inventory
from tests.support.e2e import Run, host_run, host_ssh, installer

pytestmark = pytest.mark.e2e

# docs/ha.md measures 1.5-2.8 s in network namespaces on this machine; the lab adds the real
# gateway's drain and a loaded 2-core machine under the lab's CPU engines. The bound says "moved
# within seconds"; the measured figures are printed.
MOVED_WITHIN_S = 10.0
SERVED_AGAIN_WITHIN_S = 15.0


def _holders(lab_hosts, vip: str) -> list[str]:  # type: ignore[no-untyped-def]
    address = vip.split("/")[0]
    return [h.name for h in lab_hosts.hosts
            if f" {address}/" in host_run(lab_hosts, h, "ip -o -4 addr show")]


def _wait(cond, seconds: float, what: str, since: float | None = None) -> float:  # type: ignore[no-untyped-def]
    """Seconds from `since` (default: now) until cond() holds; fails after `seconds`."""
    start = time.monotonic() if since is None else since
    while not cond():
        assert time.monotonic() - start < seconds, what
        time.sleep(0.1)
    return time.monotonic() - start


@dataclass
class Load:
    """One client sending completions to the VIP one after another, a new connection each (as a
    client that reconnects would), recording (sent at, ok) for every request."""

    url: str
    ca: Path
    secret: str
    model: str
    results: list[tuple[float, bool]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        body = {"model": self.model, "prompt": "hi", "max_tokens": 1}
        auth = {"Authorization": f"Bearer {self.secret}"}
        trust = ssl.create_default_context(cafile=str(self.ca))
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                # connect: a VIP nobody holds answers nothing; read: a CPU engine on a busy machine
                with httpx.Client(verify=trust, timeout=httpx.Timeout(30, connect=1)) as c:
                    ok = c.post(self.url, json=body, headers=auth).status_code == 200
            except httpx.HTTPError:
                ok = False
            self.results.append((sent, ok))
            time.sleep(0.2)


def test_vip_moves_when_the_holders_gateway_stops(deployed: Run, lab_hosts, lab_vip: str, api_key: str,
                                                  tmp_path: Path) -> None:
    inv = load_inventory(lab_hosts.inventory_path)
    assert inv.frontend is not None and inv.frontend.vip == lab_vip
    proc = installer("ca", "export", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, proc.stderr
    ca = tmp_path / "ca.pem"
    ca.write_text(proc.stdout)
    _wait(lambda: len(_holders(lab_hosts, lab_vip)) == 1, 20, "no single lab host took the VIP")
    old = _holders(lab_hosts, lab_vip)[0]
    holder = next(h for h in lab_hosts.hosts if h.name == old)
    other = next(h.name for h in lab_hosts.hosts if h.name != old)

    # The certificate names the VIP: httpx verifies it against the address itself.
    load = Load(f"https://{lab_vip.split('/')[0]}:{inv.ports.gateway}/v1/completions", ca, api_key,
                inv.model.served_name)
    thread = threading.Thread(target=load.run, daemon=True)
    thread.start()
    try:
        _wait(lambda: sum(ok for _, ok in load.results) >= 3, 60, f"no answers through the VIP: {load.results}")
        # `systemctl stop` returns once the drain has ended; the VIP should leave before that.
        stopping = threading.Thread(target=host_run, args=(
            lab_hosts, holder, "systemctl stop private-llm-gateway.socket private-llm-gateway.service"))
        stopped = time.monotonic()
        stopping.start()
        moved = _wait(lambda: _holders(lab_hosts, lab_vip) == [other], MOVED_WITHIN_S,
                      f"the VIP did not move from {old} to {other} within {MOVED_WITHIN_S} s", stopped)
        again = _wait(lambda: any(ok for sent, ok in load.results if sent > stopped + moved),
                      SERVED_AGAIN_WITHIN_S, f"no answer through the VIP after it moved: {load.results[-10:]}",
                      stopped)
        stopping.join(90)
    finally:
        load.stop.set()
        thread.join(60)
        host_ssh(lab_hosts, holder, "systemctl start private-llm-gateway")
    after = [(sent - stopped, ok) for sent, ok in load.results if sent >= stopped]
    failed = [round(t, 2) for t, ok in after if not ok]
    print(f"\nVIP {lab_vip}: {old} -> {other} {moved:.2f} s after `systemctl stop` of the gateway; "
          f"served again {again:.2f} s after it; {len(failed)} of {len(after)} requests failed "
          f"since the stop (at {failed} s)")
    # The requests that fail are those sent while the address moves: none between the first
    # answer and the stop, none after the first answer from the new holder.
    first = next(sent for sent, ok in load.results if ok)
    assert all(ok for sent, ok in load.results if first <= sent < stopped), load.results
    assert all(t <= again for t in failed), failed

    # The old holder's gateway is ready again: the VIP stays where it went (nopreempt).
    _wait(lambda: host_ssh(lab_hosts, holder, "systemctl is-active private-llm-gateway").stdout.strip() == "active",
          60, f"the gateway on {old} did not start again")
    time.sleep(3)  # > 2 checks of its keepalived: it leaves FAULT, as a backup
    assert _holders(lab_hosts, lab_vip) == [other]
