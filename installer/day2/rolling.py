"""Rolling a deployment to a revision: host by host, behind health gates, rolled back on failure.

For each batch of serving hosts:
  1. drain: every gateway stops routing to the batch's engines; wait until none is in use;
  2. configure: site.yml with the target revision's inventory and playbooks, limited to the
     batch (its release directory, `current`, configuration, restarts; the gateway restarts
     through its systemd socket, so clients are queued, never refused); the play's health
     check proves each engine with a real completion on its host;
  3. re-admit on the own gateway, and gate: each host's gateway takes its own engines back
     while every other gateway keeps the batch drained, and each engine, alone behind that
     gateway, answers a real completion from here (installer/day2/gate.py says why);
  4. re-admit everywhere: the batch's engines go back into every gateway's rotation.
A failed gate drains the batch again, rolls it back to the revision each host ran before
(proven the same way), re-admits it, and stops: later batches are never touched. A run killed
at any point is safe to repeat: every step is idempotent, and a host counts as upgraded only
once its gate passed.

Monitoring moves ahead of the gateways it scrapes when the roll goes forward, and behind them
when it goes back: a Prometheus configured by a newer revision also scrapes older gateways (an
old gateway ignores the scrape token's header), while one of an older revision is refused by
newer gateways (their /metrics answer only that token). Monitoring-only hosts are configured
before the first batch of a forward roll (nothing is drained until they pass) and after the last
batch of a backward one; a serving host that also monitors goes first, or last, in the batch
order, and its own batch's play configures its Prometheus.
"""

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from installer.ansible import render
from installer.ansible.runner import PlaybookResult, run_playbook
from installer.base.errors import AnsibleError
from installer.base.runlog import RunLog
from installer.day2 import drain, gate
from installer.inventory import Host, Inventory
from installer.planning import plan, plan_record
from installer.secrets import keys, secret_files
from installer.state import revisions
from installer.state.revisions import Revision

Note = Callable[[str], None]
TaskEvent = Callable[[str, str, str], None]


@dataclass
class HostStep:
    name: str
    before: int | None
    after: int | None
    action: str  # upgraded | unchanged | rolled back | not touched | failed | configured (monitoring-only)
    seconds: float = 0.0
    drain_s: float = 0.0
    detail: str = ""


@dataclass
class RollResult:
    target: Revision
    steps: list[HostStep] = field(default_factory=list)
    stopped_at: str | None = None  # the host whose gate failed

    @property
    def success(self) -> bool:
        return self.stopped_at is None and all(
            s.action in ("upgraded", "unchanged", "configured") for s in self.steps
        )


def batches(hosts: list[Host], size: int, together: frozenset[str] = frozenset()) -> list[list[Host]]:
    """Slices of `size` hosts in order, with the hosts named in `together` (a Ray group: one
    model across hosts) whole in one batch, even past `size`. A head restarted on a new release
    beside workers still on the old one cannot form the group (Ray refuses a node of another
    version), so the group is drained, configured and proven as one."""
    out: list[list[Host]] = []
    current: list[Host] = []
    placed: set[str] = set()
    for host in hosts:
        if host.name in placed:
            continue
        unit = [h for h in hosts if h.name in together] if host.name in together else [host]
        if current and len(current) + len(unit) > size:
            out.append(current)
            current = []
        current += unit
        placed.update(h.name for h in unit)
        if len(current) >= size:
            out.append(current)
            current = []
    return [*out, current] if current else out


def ray_group(dp: plan.DeploymentPlan) -> frozenset[str]:
    """The hosts of the deployment's Ray cluster (empty: no model spans hosts)."""
    return frozenset(h.name for h in dp.hosts if h.ray is not None)


def ray_hosts(dp: plan.DeploymentPlan, deployment: str, current: dict[str, int]) -> frozenset[str]:
    """The hosts to move as one: the target's Ray group and the group of each revision the hosts
    run now (from its kept plan), so a group the target dissolves or reshapes is not split while
    its head and workers still serve together."""
    hosts = set(ray_group(dp))
    for number in set(current.values()):
        try:
            rec = revisions.get(deployment, number).plan_record()
        except revisions.StateError:
            continue  # a revision without a snapshot: nothing to read
        hosts |= {h["name"] for h in (rec or {}).get("hosts", []) if h.get("ray")}
    return frozenset(hosts)


def monitoring_only(inv: Inventory) -> list[Host]:
    return [h for h in inv.hosts if "monitoring" in inv.host_groups(h) and "serving" not in h.groups]


def goes_forward(target: Revision, hosts: list[Host], current: dict[str, int]) -> bool:
    """No serving host runs a revision newer than the target (an upgrade, not a rollback)."""
    return all(current.get(h.name, 0) <= target.number for h in hosts)


def roll_order(inv: Inventory, hosts: list[Host], forward: bool) -> list[Host]:
    """The inventory order, with the serving hosts that also monitor first (forward) or last."""
    monitors = [h for h in hosts if "monitoring" in inv.host_groups(h)]
    others = [h for h in hosts if h not in monitors]
    return [*monitors, *others] if forward else [*others, *monitors]


def _configure_monitoring(
    target: "Planned", hosts: list[Host], log: RunLog, note: Note, on_task: TaskEvent, *, first: bool
) -> list[HostStep]:
    """The monitoring-only hosts at the target revision: site.yml limited to them, what `up` does
    there. Before the first batch a failure stops the roll with nothing else touched."""
    note(f"monitoring: configuring {', '.join(h.name for h in hosts)} for revision {target.rev.number}"
         + (" before any gateway" if first else ""))
    problems = gate.play_problems(_configure(target, hosts, log, "monitoring", on_task), hosts)
    if problems and first:
        raise AnsibleError(
            f"the monitoring hosts could not be configured for revision {target.rev.number}; "
            "no serving host was touched",
            [*(f"{h}: {p}" for h, p in problems.items()),
             "upgraded gateways answer only a Prometheus that sends their scrape token: fix the "
             "monitoring host and run the upgrade again"],
        )
    return [
        HostStep(h.name, None, None, "failed", detail=problems[h.name]) if h.name in problems
        else HostStep(h.name, None, target.rev.number, "configured")
        for h in hosts
    ]


@dataclass(frozen=True)
class Planned:
    """A revision and its plan, built once per command (the target's comes from prepare)."""

    rev: Revision
    plan: plan.DeploymentPlan

    @classmethod
    def of(cls, rev: Revision) -> "Planned":
        """The revision's plan, its engines pinned to what the revision recorded running."""
        built = plan.build(rev.inventory())
        rec = rev.plan_record()
        return cls(rev, built if rec is None else plan_record.pinned(built, rec))


def _configure(
    target: Planned, hosts: list[Host], log: RunLog, label: str, on_task: TaskEvent
) -> PlaybookResult:
    return run_site(target.plan, target.rev, hosts, log, label, on_task)


def run_site(
    deployment_plan: plan.DeploymentPlan, rev: Revision, hosts: list[Host], log: RunLog, label: str,
    on_task: TaskEvent,
) -> PlaybookResult:
    """site.yml for `deployment_plan` with the revision's bundle, playbooks and release record,
    limited to `hosts`, as a day-2 play (the gate checks the gateways: gate.PLAY_VARS). A gray
    release passes the plan with its canary engines (installer/release/)."""
    man = rev.manifest()
    run_dir = log.dir / label
    secret_files.prepare(deployment_plan)  # the roles read them with file lookups
    inv_dir = render.write(deployment_plan, man, run_dir, extra_vars=rev.host_vars())
    return run_playbook(
        "site.yml", inv_dir, run_dir / "ansible", on_task=on_task,
        playbooks_dir=rev.playbooks_dir,
        extra_cmdline=f"--limit {','.join(h.name for h in hosts)} -e {shlex.quote(json.dumps(gate.PLAY_VARS))}",
    )


def _gate(target: Planned, pb: PlaybookResult, hosts: list[Host], drained: list[str], secret: str) -> dict[str, str]:
    """Problems per failed host; empty when every engine of the batch is proven (gate.py).
    Each host that passed the play is proven, so a rollback's verdict is per host."""
    problems = gate.play_problems(pb, hosts)
    passed = [h for h in hosts if h.name not in problems]
    return problems | gate.prove_batch(target.plan, passed, drained, secret) if passed else problems


def roll(
    target: Revision,
    log: RunLog,
    *,
    target_plan: plan.DeploymentPlan | None = None,
    batch_size: int = 1,
    drain_timeout_s: float = 120,
    note: Note = lambda _m: None,
    on_task: TaskEvent = lambda _h, _t, _s: None,
) -> RollResult:
    """Every serving host to `target` (`target_plan`: its plan as the command built it; built
    here when not given), batch by batch behind the gates; a failed batch goes back."""
    planned = Planned(target, target_plan) if target_plan is not None else Planned.of(target)
    inv: Inventory = planned.plan.inventory
    secret = keys.ensure_probe_key()
    current = revisions.host_revisions(inv.deployment)
    result = RollResult(target)
    forward = goes_forward(target, drain.serving(inv), current)
    hosts = roll_order(inv, drain.serving(inv), forward)
    monitors = monitoring_only(inv)
    if forward and monitors:
        result.steps += _configure_monitoring(planned, monitors, log, note, on_task, first=True)
    # Whatever a killed run left drained is re-admitted only when its host passes a gate below.
    group = ray_hosts(planned.plan, inv.deployment, current)
    for n, batch in enumerate(batches(hosts, batch_size, group), 1):
        names = [h.name for h in batch]
        if all(current.get(h.name) == target.number for h in batch):
            result.steps += [HostStep(h.name, target.number, target.number, "unchanged") for h in batch]
            continue
        start = time.monotonic()
        note(f"batch {n}: {', '.join(names)}: draining")
        drained = drain.names_of(planned.plan, batch)
        if len(batch) == len(hosts):
            note(f"batch {n}: every serving host at once: no engine serves clients until it passes")
        elif len(batch) > batch_size:
            note(f"batch {n}: the Ray group {', '.join(sorted(group))} goes as one")
        drain.set_drained(inv, drained)
        waited = drain.wait_idle(inv, drained, drain_timeout_s)
        note(f"batch {n}: drained in {waited:.1f} s; configuring revision {target.number}")
        pb = _configure(planned, batch, log, f"batch-{n}", on_task)
        note(f"batch {n}: proving each engine alone behind its own gateway")
        problems = _gate(planned, pb, batch, drained, secret)
        if not problems:
            drain.set_drained(inv, [])
            revisions.record(inv.deployment, target, dict.fromkeys(names, True), log)
            took = time.monotonic() - start
            result.steps += [
                HostStep(h.name, current.get(h.name), target.number, "upgraded", took, waited) for h in batch
            ]
            note(f"batch {n}: gate passed, back in rotation ({took:.0f} s)")
            continue
        note(f"batch {n}: gate FAILED: " + "; ".join(f"{h}: {p}" for h, p in problems.items()))
        result.stopped_at = next(iter(problems))
        # Its own gateway may have sent clients to the batch during the gate: drained again first.
        drain.set_drained(inv, drained)
        drain.wait_idle(inv, drained, drain_timeout_s)
        result.steps += _roll_back(batch, drained, current, log, n, secret, note, on_task, problems, waited, start)
        drain.set_drained(inv, [])
        done = {s.name for s in result.steps}
        result.steps += [
            HostStep(h.name, current.get(h.name), current.get(h.name), "not touched")
            for h in hosts if h.name not in done
        ]
        break
    else:
        # A run killed between a gate and its re-admission left engines drained: none now.
        drain.set_drained(inv, [])
        if not forward and monitors:
            result.steps += _configure_monitoring(planned, monitors, log, note, on_task, first=False)
    return result


def _roll_back(
    batch: list[Host],
    drained: list[str],
    current: dict[str, int],
    log: RunLog,
    n: int,
    secret: str,
    note: Note,
    on_task: TaskEvent,
    problems: dict[str, str],
    waited: float,
    start: float,
) -> list[HostStep]:
    """Each host of a failed batch back to the revision it ran before (grouped by revision)."""
    steps: list[HostStep] = []
    by_rev: dict[int, list[Host]] = {}
    for host in batch:
        if host.name in current:
            by_rev.setdefault(current[host.name], []).append(host)
        else:  # never ran a recorded revision: nothing to return to
            steps.append(HostStep(host.name, None, None, "failed", 0, waited, problems.get(host.name, "")))
    for number, hosts in by_rev.items():
        previous = Planned.of(revisions.get(log.deployment, number))  # the plan of the revision it ran
        note(f"batch {n}: rolling {', '.join(h.name for h in hosts)} back to revision {number}")
        pb = _configure(previous, hosts, log, f"batch-{n}-rollback", on_task)
        # Drained everywhere meanwhile: the names the target gave the batch, and its own.
        back = _gate(previous, pb, hosts, sorted({*drained, *drain.names_of(previous.plan, hosts)}), secret)
        for h in hosts:
            action = "rolled back" if h.name not in back else "failed"
            detail = problems.get(h.name, "gate failed on another host of the batch")
            if h.name in back:
                detail += f"; rollback failed too: {back[h.name]}"
            steps.append(HostStep(h.name, number, number if action == "rolled back" else None, action,
                                  time.monotonic() - start, waited, detail))
    return steps


def summary_rows(result: RollResult) -> list[list[str]]:
    def rev(n: int | None) -> str:
        return "-" if n is None else str(n)

    return [
        [s.name, rev(s.before), rev(s.after), s.action, f"{s.drain_s:.1f}", f"{s.seconds:.0f}", s.detail[:90]]
        for s in result.steps
    ]
