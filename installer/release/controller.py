"""The release controller (service/release_controller.py) as the control machine reaches it:
service/release_admin.py run on the controller's host over SSH (installer/hosts/remote.py, as root),
one JSON request in and one answer out. That script reads the controller's own settings file,
so the Redis password never leaves the host and the control machine needs no route to Redis.

start hands a release over (refused while the controller runs one), watch and status read its
state and audit trail, promote steps it and abort stops it (both take the controller's lease
over first, so it cannot step the weights after them), and finish takes the spec away once the
Ansible cleanup is done.
"""

import json
import secrets
from typing import Any

from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT, controller_hosts
from installer.release.spec import Sides
from installer.release.state import Release, ReleaseError

ADMIN = (f"{HOST_LAYOUT['pli_root']}/current/gateway-venv/bin/python -m service.release_admin "
         f"--settings {HOST_LAYOUT['pli_config_dir']}/release-controller.json")
REFUSED = 3  # service/release_admin.py's exit status for a request that does not fit Redis's release
TIMEOUT_S = 30.0


class ControllerUnreachable(ReleaseError):
    """The controller's host could not be asked."""


class ControllerRefused(ReleaseError):
    """The request does not fit the release the controller runs; nothing was written."""


def host(inv: Inventory) -> Host:
    found = controller_hosts(inv)
    if not found:
        raise ReleaseError(
            f"deployment {inv.deployment} has no monitoring host that also serves, so no release controller "
            "runs on it (it needs the gateway's venv, the deployment certificate and Redis, which only serving "
            "hosts have)",
            ["put a serving host in the `monitoring` group (or leave `monitoring` to no host: the first host "
             "is then in it) and run `installer up -i INVENTORY`"],
        )
    return found[0]


def call(inv: Inventory, request: dict[str, Any]) -> dict[str, Any]:
    """The controller host's answer to `request`; ControllerRefused or ControllerUnreachable."""
    h = host(inv)
    r = remote.run_one(target(inv, h), ADMIN, stdin=json.dumps(request).encode(), timeout=TIMEOUT_S)
    try:
        answer = json.loads(r.text) if r.text.strip() else {}
    except ValueError:  # a host without the controller answers a traceback, not JSON
        answer = {}
    if r.rc == REFUSED and "refused" in answer:
        raise ControllerRefused(f"the release controller on {h.name} refused {request['op']}: {answer['refused']}")
    if not r.ok or not isinstance(answer, dict):
        raise ControllerUnreachable(
            f"the release controller on {h.name} could not be asked ({request['op']}): {r.why}",
            ["`installer up -i INVENTORY` installs it there; `installer status` says whether the host answers"],
        )
    return answer


def release_id(deployment: str, release: Release) -> str:
    """One id per start. The canary's revision is not enough: starting the same canary again
    (after an abort) reuses its revision, and the controller's state of the earlier start, a
    rollback, would be read as this one's verdict."""
    return f"{deployment}/{release.model}/r{release.canary}-{secrets.token_hex(4)}"


def spec_of(release: Release, s: Sides) -> dict[str, Any]:
    """What the controller runs (service/release_controller.py's policy_of reads it): the
    steps, the dwell, auto_promote, the SLO, and the canary's engines as the gateways name them."""
    settings = s.canary_spec().release
    slo = settings.slo
    return {
        "id": release.controller, "model": release.model, "served_name": release.served_name,
        "stable": release.stable, "canary": release.canary, "steps": list(release.steps),
        "dwell_s": settings.step_hold_s, "auto_promote": settings.auto_promote,
        "canary_engines": s.canary_engines(),
        "slo": {"window_s": slo.window_s, "min_requests": slo.min_requests, "relative": slo.relative,
                "error_ratio_margin": slo.error_ratio_margin, "ttft_p99_ratio": slo.ttft_p99_ratio,
                "e2e_p95_ratio": slo.e2e_p95_ratio, "latency_floor_s": slo.latency_floor_s,
                "absolute": list(slo.absolute)},
    }


def show(inv: Inventory) -> dict[str, Any]:
    """{spec, state, lease, audit}: the release in Redis, the controller's record of it, who
    holds the lease, and its decisions from the audit log."""
    return call(inv, {"op": "show"})


def running(view: dict[str, Any]) -> dict[str, Any] | None:
    """The spec of the release the controller runs in `view`, or None when it runs none."""
    spec, st = view.get("spec"), view.get("state") or {}
    if not spec:
        return None
    ended = st.get("release") == spec.get("id") and st.get("verdict") != "running"
    return None if ended else spec


def refuse_running(inv: Inventory) -> None:
    """start: the controller runs one release at a time, whichever control machine started it."""
    spec = running(show(inv))
    if spec is not None:
        raise ControllerRefused(
            f"the release controller on {host(inv).name} runs release {spec.get('id')} of model "
            f"{spec.get('model', spec.get('served_name'))}",
            ["finish it first with `installer release promote|abort` (from the control machine that started it, "
             "whose state records it)"],
        )


def start(inv: Inventory, spec: dict[str, Any]) -> None:
    call(inv, {"op": "start", "spec": spec})


def stop(inv: Inventory, release: str) -> dict[str, Any]:
    """The release aborted in Redis (canary 0%), the controller fenced out; the state written."""
    state: dict[str, Any] = call(inv, {"op": "stop", "release": release})["state"]
    return state


def step(inv: Inventory, release: str, seen_step: int) -> dict[str, Any]:
    """The step after `seen_step` (promoted at the last), the controller fenced out; the state."""
    state: dict[str, Any] = call(inv, {"op": "step", "release": release, "step": seen_step})["state"]
    return state


def finish(inv: Inventory, release: str) -> None:
    call(inv, {"op": "finish", "release": release})
