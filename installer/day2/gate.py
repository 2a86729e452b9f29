"""The gate a batch passes before any other gateway sends it a client: its new engines serve.

Two proofs, both of the batch's own engines:
  1. the play's health check: on each host, the engine itself answers a real chat completion
     (playbooks/roles/healthcheck, reported in the play's result);
  2. from this machine, a real chat completion through the host's own gateway, which at that
     moment can route to one engine only: the one being proven.

Why the second proof is pinned, and how. The batch is drained on every gateway while it
restarts. Proving through a gateway in that state proves nothing about the new engines: with
other engines left, one of them answers; with none (one serving host, or a batch of every host)
/readyz is 503 and the gate, and the rollback's gate, could never pass. The gateway has no
per-request pin, but the drain file is per gateway host. So, host by host:
  - re-admit: the host's own gateway gets its engines back, beside the ones it already used
    (the rest of the batch stays drained there too), and the installer waits until that
    gateway reports them ready — so the next step never leaves its clients with no engine;
  - pin: that gateway's drain list becomes every engine but the one under proof, /readyz must
    say exactly that one is ready, and only then the request is sent. The gateway's retry also
    picks among ready engines only, so no other engine can answer it.
Every other gateway keeps the whole batch drained until all of it has passed; a failed proof
means no client of another gateway was ever sent to the failed engine. The play's own wait for
the gateway's /readyz is skipped on day 2 (`healthcheck_gateway_url` empty) because it is 503
while every engine that gateway knows is drained; the pinned proof is stricter than it.
"""

import time

from installer.ansible.runner import PlaybookResult
from installer.day2 import drain
from installer.day2.drain import DrainError
from installer.hosts import prove
from installer.inventory import Host, Inventory
from installer.planning import plan

# Extra vars for a day-2 play: the gate below checks the gateway instead (see above).
PLAY_VARS = {"healthcheck_gateway_url": ""}
READY_TIMEOUT_S = 60.0
# A gateway with several workers checks engines in each worker: one may see the engine ready
# a health interval after another, so a refused proof is asked again a few times.
PROOF_ATTEMPTS = 3
PROOF_PAUSE_S = 2.0


def play_problems(pb: PlaybookResult, hosts: list[Host]) -> dict[str, str]:
    """Problems per host from the play itself; empty when every host of the batch passed it."""
    if pb.rc != 0 and all(pb.hosts.get(h.name) and pb.hosts[h.name].success for h in hosts):
        return {h.name: f"ansible-playbook ended early ({pb.status}, rc={pb.rc})" for h in hosts}
    problems: dict[str, str] = {}
    for host in hosts:
        hr = pb.hosts.get(host.name)
        if hr is None or not hr.success:
            problems[host.name] = hr.error if hr else "not in the play"
    return problems


def _prove(inv: Inventory, host: Host, secret: str) -> prove.Proof:
    proof = prove.prove_host(prove.gateway_base(inv, host.address), host.name, inv.model.served_name,
                             secret, ca_file=prove.ca_file(inv))
    for _ in range(PROOF_ATTEMPTS - 1):
        if proof.ok:
            break
        time.sleep(PROOF_PAUSE_S)
        proof = prove.prove_host(prove.gateway_base(inv, host.address), host.name, inv.model.served_name,
                                 secret, ca_file=prove.ca_file(inv))
    return proof


def _prove_engines(
    dp: plan.DeploymentPlan, host: Host, drained: list[str], everyone: list[str], secret: str
) -> str | None:
    """Re-admit the host's engines on its own gateway, then prove each one alone through it.
    Its gateway ends routing to them when they passed, and drained of them again when not."""
    inv = dp.inventory
    own = list(dp.engine_names(host.name))
    readmitted = [n for n in drained if n not in own]
    passed = False
    try:
        drain.set_drained(inv, readmitted, [host])
        drain.wait_routing(inv, host, dict.fromkeys(own, True), READY_TIMEOUT_S)
        for name in own:
            drain.set_drained(inv, [n for n in everyone if n != name], [host])
            drain.wait_routing(inv, host, {n: n == name for n in everyone}, READY_TIMEOUT_S)
            proof = _prove(inv, host, secret)
            if not proof.ok:
                return f"engine {name} alone behind the gateway on {host.name}: {proof.detail}"
        passed = True
        return None
    finally:
        # Unpinned while the rest of the batch is proven; a failed engine gets no more clients.
        drain.set_drained(inv, readmitted if passed else drained, [host])


def _prove_gateway(inv: Inventory, host: Host, drained: list[str], proven: list[str], secret: str) -> str | None:
    """A serving host without engines of its own (a Ray worker): its gateway, with the batch's
    proven engines back in its rotation."""
    drain.set_drained(inv, [n for n in drained if n not in proven], [host])
    drain.wait_routing(inv, host, dict.fromkeys(proven, True), READY_TIMEOUT_S)
    proof = _prove(inv, host, secret)
    return None if proof.ok else f"the gateway on {host.name}: {proof.detail}"


def prove_batch(dp: plan.DeploymentPlan, hosts: list[Host], drained: list[str], secret: str) -> dict[str, str]:
    """Problems per host; empty when every engine of the batch answered alone through its own
    host's gateway. `drained`: the engines every other gateway keeps out of rotation meanwhile.
    On success each host's gateway routes to its own engines and to those outside `drained`;
    the caller then re-admits the batch everywhere."""
    inv = dp.inventory
    everyone = drain.names_of(dp, drain.serving(inv))
    with_engines = [h for h in hosts if dp.engine_names(h.name)]
    problems: dict[str, str] = {}
    for host in [*with_engines, *(h for h in hosts if h not in with_engines)]:
        try:
            if host in with_engines:
                problem = _prove_engines(dp, host, drained, everyone, secret)
            else:
                proven = drain.names_of(dp, [h for h in with_engines if h.name not in problems])
                problem = _prove_gateway(inv, host, drained, proven, secret)
        except DrainError as exc:
            problem = "; ".join([str(exc), *exc.details])
        if problem:
            problems[host.name] = problem
    return problems
