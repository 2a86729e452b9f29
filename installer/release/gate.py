"""Proving one stage's engines through their host's gateway, one engine at a time.

The stage header (`X-Release-Stage`) makes the gateway pick the named stage whatever the
weights, but among every ready engine of that stage; so, as installer/day2/gate.py does for a
rolling upgrade, the host's gateway is pinned with its drain file: every other engine of the
same stage is drained there until the proof passed. The other stage keeps serving that
gateway's clients meanwhile, and no other gateway is touched.
"""

import time
from collections.abc import Mapping

from installer.day2 import drain
from installer.day2.drain import DrainError
from installer.day2.gate import PROOF_ATTEMPTS, PROOF_PAUSE_S
from installer.hosts import prove
from installer.inventory import Inventory

STAGE_HEADER = "X-Release-Stage"
# An engine the release just started may still be loading its weights and warming up (minutes
# on GPUs, and the Ansible play does not wait for canary engines): the gate waits this long for
# the gateway to call it ready, not the minute day 2 gives engines that were already running.
STARTING_ENGINE_TIMEOUT_S = 600.0


def _proof(inv: Inventory, address: str, host: str, served_name: str, task: str, secret: str,
           headers: Mapping[str, str]) -> prove.Proof:
    """The stage's own engine must answer (the gateway says which in the same header): one that
    falls back to the other stage proves nothing."""
    def once() -> prove.Proof:
        return prove.prove_host(prove.gateway_base(inv, address), host, served_name, secret,
                                ca_file=prove.ca_file(inv), headers=headers, task=task, expect_headers=headers)

    proof = once()
    for _ in range(PROOF_ATTEMPTS - 1):
        if proof.ok:
            break
        time.sleep(PROOF_PAUSE_S)
        proof = once()
    return proof


def prove_stage(
    inv: Inventory, by_host: Mapping[str, list[str]], stage: str, served_name: str, task: str, secret: str,
    drained_after: list[str] | None = None,
) -> dict[str, str]:
    """Problems per host; empty when each engine of `by_host` (the stage's engines, by host)
    answered alone among its stage through its own host's gateway. Each gateway ends with
    `drained_after` drained (default: none)."""
    headers = {STAGE_HEADER: stage}
    same_stage = sorted(n for names in by_host.values() for n in names)
    problems: dict[str, str] = {}
    for host in drain.serving(inv):
        for name in by_host.get(host.name, []):
            others = [n for n in same_stage if n != name]
            try:
                # the engine proved is never drained, even when it is drained afterwards (promote)
                drain.set_drained(inv, sorted({*others, *(drained_after or [])} - {name}), [host])
                drain.wait_routing(inv, host, {name: True, **dict.fromkeys(others, False)},
                                   STARTING_ENGINE_TIMEOUT_S)
                proof = _proof(inv, host.address, host.name, served_name, task, secret, headers)
                if not proof.ok:
                    problems[host.name] = f"{stage} engine {name} through the gateway on {host.name}: {proof.detail}"
            except DrainError as exc:
                problems[host.name] = "; ".join([str(exc), *exc.details])
            finally:
                drain.set_drained(inv, drained_after or [], [host])
            if host.name in problems:
                return problems  # the first failure is the verdict: the caller aborts or stops
    return problems
