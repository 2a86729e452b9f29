"""`installer up`: prepare (validate -> provision -> bundle -> preflight -> push, in
installer/preparation/prepare.py, shared with `upgrade`) -> configure -> prove -> report.

Everything that can be checked is checked before the first host is touched (prepare.py says
what); a failure in those phases changes nothing.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from installer import tls
from installer.ansible import render
from installer.ansible.runner import HostResult, PlaybookResult, run_playbook
from installer.base.errors import AnsibleError
from installer.base.runlog import RunLog
from installer.bundle.manifest import Manifest
from installer.converged import fast_path as converged
from installer.day2 import uninstall
from installer.flows import gpu_checks
from installer.gpu import doctor as gpu_doctor
from installer.hosts.prove import Proof, gateway_base, prove
from installer.hosts.ssh import targets
from installer.inventory import Inventory
from installer.planning.plan import DeploymentPlan
from installer.preparation.prepare import Reporter, prepare, timed
from installer.secrets import keys, secret_files
from installer.state import revisions

FAST_GPU_CHECKS = gpu_checks.Options(gemm=False, nccl=False)


@dataclass
class HostSummary:
    name: str
    address: str
    state: str
    changed: int
    endpoint: str
    model: str
    detail: str = ""
    gpu: str = ""  # gpu_verify's checks in one line (installer/gpu/doctor.py summary_line); "" on CPU hosts
    gpu_checks: dict = field(default_factory=dict)  # its whole result, for summary.json
    # The tasks (and handlers) that changed something, in order: summary.json shows what a run repaired.
    changed_tasks: list[str] = field(default_factory=list)


@dataclass
class UpResult:
    inventory: Inventory
    manifest: Manifest
    bundle_built: bool
    run_dir: Path
    hosts: list[HostSummary] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    playbook: PlaybookResult | None = None
    # "fast": the hosts matched their record and Ansible was skipped (installer/converged/fast_path.py);
    # "full": Ansible ran, for `full_reasons`; "check": --check
    configure: str = "full"
    full_reasons: list[str] = field(default_factory=list)
    deployment_plan: DeploymentPlan | None = None  # the one the command built (prepare)

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts)

    @property
    def success(self) -> bool:
        return all(h.state in ("ready", "checked") for h in self.hosts)


def _detail(hr: "HostResult | None", ok: bool) -> str:
    if hr is None:
        return "no result (host not in the play)"
    if not ok:
        return hr.error
    probe = hr.facts.get("healthcheck")
    return f"chat completion in {probe['latency_ms']} ms" if probe else ""


def host_summaries(
    inv: Inventory, pb: PlaybookResult, proofs: dict[str, Proof], check: bool = False
) -> list[HostSummary]:
    """One row per host: the playbook's result and the proof through its gateway."""
    rows = []
    for host in inv.hosts:
        hr = pb.hosts.get(host.name)
        proof = proofs.get(host.name)
        # A playbook that ended early (killed, or a crash) has no verdict for its hosts.
        ok = pb.rc == 0 and hr is not None and hr.success and (check or proof is None or proof.ok)
        if not ok:
            state = "unreachable" if hr and hr.unreachable else "failed"
        else:
            state = "checked" if check else "ready"
        rows.append(HostSummary(
            name=host.name,
            address=host.address,
            state=state,
            changed=hr.changed if hr else 0,
            endpoint=proof.endpoint if proof else f"{gateway_base(inv, host.address)}/v1",
            model=inv.model.served_name,
            detail=(
                f"ansible-playbook ended early ({pb.status}, rc={pb.rc})" if pb.rc != 0 and hr and hr.success
                else proof.detail if proof and (proof.ok or (hr and hr.success)) else _detail(hr, ok)
            ),
            gpu=gpu_doctor.summary_line(hr.facts.get("gpu_verify")) if hr else "",
            gpu_checks=hr.facts.get("gpu_verify", {}) if hr else {},
            changed_tasks=list(hr.changed_tasks) if hr else [],
        ))
    return rows


def up(
    inventory_path: Path,
    reporter: Reporter,
    *,
    bundle_path: Path | None = None,
    trusted_keys: tuple[Path, ...] = (),
    insecure: bool = False,
    check: bool = False,
    prune: bool = False,
    adopt: bool = False,
    full: bool = False,
    on_runlog: Callable[[RunLog], None] = lambda _l: None,
) -> UpResult:
    p = prepare(
        inventory_path, reporter, bundle_path=bundle_path, trusted_keys=trusted_keys,
        insecure=insecure, check=check, adopt=adopt, on_runlog=on_runlog,
    )
    inv, man, log = p.inv, p.manifest, p.log
    result = UpResult(inv, man, p.built, log.dir, deployment_plan=p.deployment_plan)
    revision = (
        None if check else revisions.next_revision(inv, man, p.root, p.playbooks_dir, above=p.adopted_above,
                                                    deployment_plan=p.deployment_plan)
    )
    if prune and not check:
        with timed(log, reporter, "prune"):
            pruned = uninstall.prune(inv, log.dir / "prune", reporter.note, reporter.task)
            if pruned is not None and not pruned.success:
                raise AnsibleError(
                    "could not remove private-llm from every pruned host; see the run log",
                    [f"{h}: {r.error}" for h, r in pruned.hosts.items() if not r.success],
                )
    else:
        for host in uninstall.departed(inv):
            reporter.note(
                f"[yellow]{host.name} ({host.address}) is no longer in the inventory but still runs "
                "this deployment[/]; `installer up --prune` drains and removes it"
            )

    probe_secret = keys.ensure_probe_key()
    for line in tls.report(inv, tls.prepare(inv)):  # issue or renew before the hosts get them
        reporter.note(line)
        log.log(line)
    deployment_plan = p.deployment_plan
    secret_files.prepare(deployment_plan)  # the roles read them with file lookups
    inv_dir = render.write(deployment_plan, man, log.dir, extra_vars=revision.host_vars() if revision else None)
    hosts = targets(inv)
    verdict = None
    gpu: dict[str, dict] = {}
    if check:
        result.configure = "check"
    elif prune or adopt:  # hosts leave or join the deployment: Ansible decides
        result.full_reasons = ["--prune" if prune else "--adopt"]
    else:
        with timed(log, reporter, "verify"):
            verdict = converged.verify(
                hosts, inv_dir, man, p.playbooks_dir, inv.deployment, full=full
            )
        if verdict.fast and inv.engine.device == "gpu":
            # The probe saw the driver, kernel and packages; the doctor sees the GPUs themselves
            # (ECC, Xid, persistence, clocks). GEMM and all-reduce stay with gpu_verify's full
            # runs: the engines hold the GPUs' memory now.
            with timed(log, reporter, "gpu checks"):
                gpu = {r["host"]: r for r in gpu_checks.check_hosts(hosts, FAST_GPU_CHECKS.argv())}
            failed = converged.gpu_reasons(gpu.values())
            if failed:
                verdict = converged.Verdict(False, failed, verdict.probes)
        result.full_reasons = verdict.reasons
    for reason in result.full_reasons:
        reporter.note(f"full configure: {reason}")
        log.log(f"full configure: {reason}")
    if verdict is not None and verdict.fast:
        result.configure = "fast"
        reporter.note("converged, verified (fast path): every managed file, link, unit and package "
                      "matches the last full configure; Ansible skipped")
        pb = converged.fast_result(hosts, inv_dir, gpu)
    else:
        if not check:
            converged.forget(inv.deployment)  # a run that stops halfway leaves nothing trusted
        with timed(log, reporter, "configure"):
            pb = run_playbook(
                "site.yml", inv_dir, log.dir / "ansible", on_task=reporter.task, check=check,
                playbooks_dir=p.playbooks_dir,
            )
    result.playbook = pb

    proofs: dict[str, Proof] = {}
    if pb.success and not check:
        with timed(log, reporter, "prove"):
            # the plan's engines: what each chat model's engines parse decides its checks
            engines = [e for h in deployment_plan.hosts for e in h.engines]
            proofs = {pr.host: pr for pr in prove(inv, probe_secret, engines)}
            for pr in proofs.values():
                reporter.note(f"{pr.host}: {'ok' if pr.ok else 'FAILED'}: {pr.detail}")
    result.hosts = host_summaries(inv, pb, proofs, check)
    ready = [t for t in hosts if any(h.name == t.name and h.state == "ready" for h in result.hosts)]
    if result.configure == "full" and ready and not check:
        with timed(log, reporter, "record"):
            for line in converged.record(ready, inv_dir, man, p.playbooks_dir, inv.deployment):
                reporter.note(f"[yellow]{line}[/]")
                log.log(line)
    elif result.configure == "fast" and len(ready) < len(hosts):
        converged.forget(inv.deployment)  # a host that fails its proof gets Ansible next time
    result.phases = dict(log.phases)
    if revision is not None:
        revisions.record(inv.deployment, revision, {h.name: h.state == "ready" for h in result.hosts}, log)
    log.write_summary({
        "success": pb.success,
        "changed": result.changed,
        "configure": result.configure,
        "full_reasons": result.full_reasons,
        "fast_path": verdict.as_dict() if verdict else None,
        "bundle_id": man.bundle_id,
        "bundle_signature": p.signature,
        "push": [pr.__dict__ for pr in p.pushed],
        "release_id": man.release_id,
        "revision": revision.number if revision else None,
        "playbooks": str(p.playbooks_dir),
        "hosts": [h.__dict__ for h in result.hosts],
    })
    return result
