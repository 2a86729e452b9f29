"""`installer plan --revision R` and `installer plan --diff`: the plan a past revision was
deployed with, and what applying the inventory now would change in the running one's.

Both read the plan record each revision keeps (installer/planning/plan_record.py); `--diff` builds the
inventory's plan once, laid out on the GPUs the running revision was (preflight's probe, when
the inventory leaves gpu.type/count out) and with the CPUs its hosts were counted with.
"""

from dataclasses import dataclass
from typing import Any

from installer.inventory import Inventory
from installer.planning import plan, plan_record
from installer.state import revisions


@dataclass(frozen=True)
class Compared:
    running: int
    lines: list[str]  # a unified diff; empty when the inventory's plan is the running one's


def of_revision(deployment: str, number: int) -> dict[str, Any]:
    """The plan record of revision `number`; StateError when it has none."""
    rev = revisions.get(deployment, number)
    rec = rev.plan_record()
    if rec is None:
        raise revisions.StateError(
            f"revision {number} of {deployment} was made before plans were kept with revisions",
            ["`installer up` or `installer upgrade` keeps the plan of every revision it makes from now on"],
        )
    return rec


def running_revision(deployment: str) -> int:
    """The newest revision a host runs (StateError when none does)."""
    on_hosts = revisions.host_revisions(deployment)
    if not on_hosts:
        raise revisions.StateError(
            f"no host of deployment {deployment} runs a revision yet", ["`installer up` first"]
        )
    return max(on_hosts.values())


def diff_running(inv: Inventory) -> Compared:
    number = running_revision(inv.deployment)
    old = of_revision(inv.deployment, number)
    laid_out, probed = inv, False
    ran = revisions.get(inv.deployment, number).inventory()
    if inv.provider != "baremetal":  # a cloud inventory's hosts come from Terraform: the running ones
        laid_out = laid_out.model_copy(update={"hosts": ran.hosts})
    if inv.engine.device == "gpu" and (inv.gpu.type is None or inv.gpu.count is None) and ran.gpu.type:
        laid_out = inv.model_copy(update={"gpu": inv.gpu.model_copy(
            update={"type": inv.gpu.type or ran.gpu.type, "count": inv.gpu.count or ran.gpu.count})})
        probed = True
    # and its gateways sized for the CPUs the running revision's hosts were counted with
    new = plan_record.record(plan.with_cpu_counts(plan.build(laid_out, probed=probed), plan_record.cpu_counts(old)))
    return Compared(number, plan_record.diff(old, new, f"revision {number} (running)", "the inventory now"))
