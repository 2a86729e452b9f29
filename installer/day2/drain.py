"""Taking a host's engines out of every gateway's rotation, and putting them back.

The installer writes the drain file (service/drain.py) on every serving host over SSH, then
polls each gateway's /readyz until none has a request outstanding on a drained engine: only
then is it safe to restart those engines without failing a request. The file is per gateway
host, so one gateway can be given its own list (installer/day2/gate.py re-admits a batch's
engines on their own host's gateway first, and pins that gateway to one engine for a proof).
"""

import json
import ssl
import time
from typing import Any

from installer.base.errors import InstallerError
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT
from installer.planning import plan

DRAIN_FILE = f"{HOST_LAYOUT['pli_config_dir']}/drain.json"
POLL_S = 0.5
# Gateways re-read the drain file at most once a second (service/drain.py), each worker on its
# own: after this long every worker's next request sees the new list.
REREAD_S = 1.2


class DrainError(InstallerError):
    """A host's engines could not be taken out of rotation (or put back)."""


def serving(inv: Inventory) -> list[Host]:
    return [h for h in inv.hosts if "serving" in h.groups]


def names_of(dp: plan.DeploymentPlan, hosts: list[Host]) -> list[str]:
    return sorted({n for h in hosts for n in dp.engine_names(h.name)})


def set_drained(inv: Inventory, names: list[str], hosts: list[Host] | None = None) -> None:
    """Write the drain file on `hosts` (default: every serving host), in parallel and atomically
    (temp file + rename)."""
    content = json.dumps({"engines": sorted(names)}) + "\n"
    failures = remote.failures(remote.write([target(inv, h) for h in (serving(inv) if hosts is None else hosts)],
                                            DRAIN_FILE, content))
    if failures:
        raise DrainError(
            "could not write the drain file on every gateway host",
            [*failures, "a gateway that cannot be told would keep sending requests to a restarting engine"],
        )


def _context(inv: Inventory) -> ssl.SSLContext | None:
    from installer.hosts import prove  # TLS settings live with the client code that proves a gateway

    ca = prove.ca_file(inv)
    return ssl.create_default_context(cafile=str(ca)) if ca else None


_NO_DETAILS = "its /readyz shows no engines (it refused this machine's scrape token: run `installer up`)"


def _readyz(inv: Inventory, host: Host, ctx: ssl.SSLContext | None) -> dict[str, Any]:
    """The gateway's /readyz with its details; ValueError without them: an answer that says
    nothing of the engines must never read as "none outstanding"."""
    from installer.hosts import prove

    body = prove.readyz(prove.gateway_base(inv, host.address), ctx, inv.deployment)
    if "engines" not in body:  # the details come together, or not at all
        raise ValueError(_NO_DETAILS)
    return body


def wait_idle(inv: Inventory, names: list[str], timeout_s: float) -> float:
    """Wait until no gateway routes to `names` and none has a request outstanding on them.

    Returns the seconds waited. A gateway that cannot be asked counts as busy: the caller
    must not restart an engine that a gateway may still be streaming from.
    """
    ctx = _context(inv)
    start = time.monotonic()
    time.sleep(REREAD_S)
    pending: list[str] = []
    while True:
        pending = []
        for host in serving(inv):
            try:
                status = _readyz(inv, host, ctx)
            except (OSError, ValueError) as exc:
                pending.append(f"{host.name}: gateway not answering ({exc})")
                continue
            for name in names:
                if status.get("engines", {}).get(name):
                    pending.append(f"{host.name}: still routes to {name}")
                elif status.get("outstanding", {}).get(name, 0):
                    pending.append(f"{host.name}: {status['outstanding'][name]} request(s) on {name}")
        if not pending:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise DrainError(f"engines {', '.join(names)} did not drain in {timeout_s:.0f} s", pending)
        time.sleep(POLL_S)


def wait_routing(inv: Inventory, host: Host, want: dict[str, bool], timeout_s: float) -> float:
    """Wait until the gateway on `host` reports each engine of `want` ready (True) or not
    routed to (False) on /readyz; the seconds waited.

    Ready there means not drained on that gateway and passed its own health check recently,
    so a True is the gateway's word that it will route to the engine.
    """
    ctx = _context(inv)
    start = time.monotonic()
    time.sleep(REREAD_S)
    while True:
        try:
            engines = _readyz(inv, host, ctx).get("engines", {})
            wrong = [f"{n} {'not ' if ok else ''}ready" for n, ok in want.items() if bool(engines.get(n)) != ok]
        except (OSError, ValueError) as exc:
            wrong = [f"gateway not answering ({exc})"]
        if not wrong:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise DrainError(
                f"the gateway on {host.name} did not route as asked within {timeout_s:.0f} s",
                [f"{host.name}: {w}" for w in wrong],
            )
        time.sleep(POLL_S)
