"""Removing private-llm from hosts: `installer down` on bare metal, `installer up --prune` for
hosts that left the inventory. Cloud hosts are destroyed with Terraform instead."""

from collections.abc import Callable
from pathlib import Path

import yaml

from installer.ansible import render
from installer.ansible.runner import PlaybookResult, run_playbook
from installer.day2 import drain
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT
from installer.planning import plan
from installer.state import revisions

TaskEvent = Callable[[str, str, str], None]


def uninstall(
    inv: Inventory, hosts: list[Host], run_dir: Path, on_task: TaskEvent = lambda _h, _t, _s: None
) -> PlaybookResult:
    sub = inv.model_copy(update={"hosts": hosts})
    inv_dir = run_dir / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump(render.targets_yaml(sub), sort_keys=False))
    (inv_dir / "group_vars" / "all.yml").write_text(yaml.safe_dump(dict(HOST_LAYOUT)))
    return run_playbook("uninstall.yml", inv_dir, run_dir / "ansible", on_task=on_task)


def departed(inv: Inventory) -> list[Host]:
    """Hosts that ran a revision of this deployment and are no longer in its inventory, as the
    inventory of their last revision described them (how to reach them)."""
    current = {h.name for h in inv.hosts}
    gone = {n: rev for n, rev in revisions.host_revisions(inv.deployment).items() if n not in current}
    found: list[Host] = []
    for name, number in sorted(gone.items()):
        try:
            old = revisions.get(inv.deployment, number).inventory()
        except revisions.StateError:
            continue
        found += [h for h in old.hosts if h.name == name]
    return found


def prune(
    inv: Inventory, run_dir: Path, note: Callable[[str], None], on_task: TaskEvent
) -> PlaybookResult | None:
    """Take departed hosts out of every gateway, then remove private-llm from them."""
    gone = departed(inv)
    if not gone:
        note("nothing to prune: every recorded host is in the inventory")
        return None
    names = [h.name for h in gone]
    note(f"pruning {', '.join(names)}: draining, then removing private-llm")
    # The remaining gateways still list the departed engines until they are reconfigured. Their
    # names come from the deployment as it ran, with the departed hosts in it: the new
    # inventory's plan has no engines for them.
    old = inv.model_copy(update={"hosts": [*inv.hosts, *gone]})
    leaving = drain.names_of(plan.build(old), gone)  # `up --prune`'s second plan: the deployment as it ran
    drain.set_drained(inv, leaving)
    drain.wait_idle(inv, leaving, timeout_s=inv.gateway.drain_timeout_s + 30)
    pb = uninstall(old, gone, run_dir, on_task)
    revisions.forget_hosts(inv.deployment, [n for n in names if pb.hosts.get(n) and pb.hosts[n].success])
    return pb
