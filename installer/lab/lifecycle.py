"""`up`, `status`, `down` and `leftovers` of a lab: the orchestration over the other modules."""

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rich.progress import Progress, TaskID

from installer.base.errors import InstallerError, LabError
from installer.hosts.sshkeys import KEY_NAME, ensure_key_pair, write_known_hosts
from installer.lab import control_ns, inventory, naming, network, processes, rootfs, sshkeys, state
from installer.lab import hosts as lab_hosts
from installer.lab.hosts import SSHAccess
from installer.lab.naming import HostPlan, LabPlan
from installer.lab.state import HostRecord, LabState

log = logging.getLogger(__name__)

DEFAULT_NAME = "lab"
DEFAULT_SUBNET = "10.213.0.0/24"
# Copying ~270 MB per host is disk-bound: two at a time is as fast as more on these machines.
COPY_WORKERS = 2

# tool -> Debian package that provides it, for the error message's fix.
_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "cp": "coreutils",
    "umount": "mount",
    "setpriv": "util-linux",
}

# What `up` runs on a host's rootfs; a killed `up` can leave them running there.
_ROOTFS_WRITERS = ("cp", "ssh-keygen")

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class LabHost:
    name: str
    address: str
    netns: str  # `ip netns exec NETNS ...` runs a command next to the host, e.g. on its loopback
    release: str = rootfs.DEFAULT_RELEASE  # its OS release, which is its bundle target


@dataclass(frozen=True)
class LabInfo:
    name: str
    subnet: str
    control_address: str
    hosts: list[LabHost]
    private_key: Path
    known_hosts: Path
    inventory_path: Path
    model_path: Path


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    pid: int | None
    alive: bool
    ssh_ok: bool
    system_state: str


class _Steps:
    """Rich progress when the caller gave us one; silence otherwise (library use, tests)."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._totals: dict[TaskID, float] = {}

    def add(self, description: str, total: float | None = None) -> TaskID | None:
        if self._progress is None:
            return None
        task = self._progress.add_task(description, total=total)
        self._totals[task] = total or 1
        return task

    def update(
        self, task: TaskID | None, description: str | None = None, advance: float = 0
    ) -> None:
        if self._progress is not None and task is not None:
            self._progress.update(task, description=description, advance=advance)

    def finish(self, task: TaskID | None, description: str) -> None:
        if self._progress is not None and task is not None:
            total = self._totals[task]
            self._progress.update(task, description=description, total=total, completed=total)


def _parallel(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(fn, items))


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise LabError(
            f"`installer {what}` needs root (network namespaces, systemd-nspawn): run it with sudo"
        )


def _require_tools(tools: Iterable[str]) -> None:
    missing = sorted({t for t in tools if shutil.which(t) is None})
    if missing:
        packages = " ".join(sorted({_TOOLS.get(t, t) for t in missing}))
        raise LabError(
            f"the lab needs {', '.join(missing)}: install with `apt-get install -y {packages}`"
        )


def _access(name: str) -> SSHAccess:
    ssh_dir = state.ssh_dir(name)
    return SSHAccess(ssh_dir / KEY_NAME, ssh_dir / "known_hosts")


def _info(st: LabState, inventory_path: Path, model_path: Path) -> LabInfo:
    access = _access(st.name)
    return LabInfo(
        name=st.name,
        subnet=st.subnet,
        control_address=st.control_address,
        hosts=[LabHost(h.name, h.address, h.netns, h.release) for h in st.hosts],
        private_key=access.key,
        known_hosts=access.known_hosts,
        inventory_path=inventory_path,
        model_path=model_path,
    )


def _finish_inventory(st: LabState, inventory_path: Path | None) -> LabInfo:
    model_path = inventory.ensure_model()
    access = _access(st.name)
    text = inventory.render(
        st.name,
        [(h.name, h.address, h.release) for h in st.hosts],
        access.key,
        access.known_hosts,
        model_path,
    )
    written = inventory.write(inventory_path or inventory.default_path(), text)
    return _info(st, written, model_path)


def _reuse(
    existing: LabState, plan: LabPlan, releases: list[str], inventory_path: Path | None
) -> LabInfo:
    """Return the running lab when it is the one asked for; otherwise say how to get there."""
    fix = f"run `installer lab down --name {plan.name}` first, or pick another --name"
    if existing.subnet != str(plan.subnet) or len(existing.hosts) != len(plan.hosts):
        raise LabError(
            f"lab {plan.name!r} already exists with {len(existing.hosts)} hosts on "
            f"{existing.subnet} (asked: {len(plan.hosts)} on {plan.subnet}): {fix}"
        )
    running = [h.release for h in existing.hosts]
    if running != releases:
        raise LabError(
            f"lab {plan.name!r} already exists with releases {','.join(running)} "
            f"(asked: {','.join(releases)}): {fix}"
        )
    broken = [s.name for s in status(plan.name) if not (s.alive and s.ssh_ok)]
    if broken:
        raise LabError(
            f"lab {plan.name!r} exists but is not fully running (down or unreachable: "
            f"{', '.join(broken)}): run `installer lab down --name {plan.name}`, "
            "then `installer lab up` again"
        )
    return _finish_inventory(existing, inventory_path)


def _check_free(plan: LabPlan) -> None:
    """Refuse before creating anything if another lab holds our names or our subnet."""
    here = state.lab_dir(plan.name)
    owner = network.bridge_owner(plan.bridge)
    if owner is not None and owner != str(here):
        raise LabError(
            f"bridge {plan.bridge} already exists and belongs to "
            f"{owner or 'something outside the installer'}: pick another --name"
            + (f" (or take that lab down where its state lives: {owner})" if owner else "")
        )
    found = leftovers(plan.name)
    if found:
        raise LabError(
            f"lab {plan.name!r} has leftovers of an earlier run: "
            f"run `installer lab down --name {plan.name}` first",
            found,
        )
    for other in sorted(state.labs_root().glob("*/lab.json")):
        other_name = other.parent.name
        other_state = state.load(other_name) if other_name != plan.name else None
        if other_state and naming.parse_subnet(other_state.subnet).overlaps(plan.subnet):
            raise LabError(
                f"lab {other_name!r} already uses subnet {other_state.subnet}: "
                f"pick another --subnet (e.g. 10.213.{_free_octet(plan.bridge)}.0/24) "
                f"or run `installer lab down --name {other_name}`"
            )
    users = network.subnet_users(plan.subnet, plan.bridge)
    if users:
        raise LabError(
            f"subnet {plan.subnet} is already in use on this machine: pick another --subnet",
            users,
        )


def _free_octet(bridge: str) -> int:
    """A third octet for a 10.213.N.0/24 suggestion that no lab or interface here uses."""
    for octet in range(1, 255):
        candidate = naming.parse_subnet(f"10.213.{octet}.0/24")
        taken = any(
            (st := state.load(path.parent.name)) is not None
            and naming.parse_subnet(st.subnet).overlaps(candidate)
            for path in state.labs_root().glob("*/lab.json")
        )
        if not taken and not network.subnet_users(candidate, bridge):
            return octet
    return 0


def _base_rootfs(release: str, steps: _Steps) -> Path:
    base = rootfs.cached_base(release)
    if base.is_dir():
        return base
    task = steps.add(f"{release} base image: debootstrap (first run only)")

    def on_line(line: str) -> None:
        if line.startswith("I: "):
            steps.update(task, description=f"{release} base image: {line[3:70]}")

    base = rootfs.ensure_base(release, on_line)
    steps.finish(task, f"{release} base image: built")
    return base


def _prepare_host(
    base: Path,
    plan: LabPlan,
    host: HostPlan,
    record: HostRecord,
    public_key: str,
    steps: _Steps,
    task: TaskID | None,
) -> list[str]:
    """Copy and personalise one host's rootfs; return its new public host keys."""
    host_root = Path(record.rootfs)
    rootfs.copy_rootfs(base, host_root)
    rootfs.personalise(host_root, host.name, [(h.name, h.address) for h in plan.hosts], public_key)
    keys = sshkeys.regenerate_host_keys(host_root)
    steps.update(task, description=f"{host.name}: booting", advance=1)
    return keys


def up(
    hosts: int,
    *,
    name: str = DEFAULT_NAME,
    subnet: str = DEFAULT_SUBNET,
    inventory_path: Path | None = None,
    releases: Sequence[str] = (rootfs.DEFAULT_RELEASE,),
    progress: Progress | None = None,
) -> LabInfo:
    """Boot a lab of `hosts` Debian hosts and write its inventory; reuse it if it runs.

    `releases`: one release for every host, or one per host in host order (debian-12, debian-13).
    """
    plan = naming.plan(name, subnet, hosts)
    host_releases = rootfs.host_releases(releases, hosts)
    _require_root("lab up")
    _require_tools(_TOOLS)
    if not all(rootfs.cached_base(r).is_dir() for r in host_releases):
        _require_tools(["debootstrap"])
    steps = _Steps(progress)
    with state.locked(name):
        existing = state.load(name)
        if existing is not None:
            return _reuse(existing, plan, host_releases, inventory_path)
        _check_free(plan)
        try:
            return _create(plan, host_releases, inventory_path, steps)
        except InstallerError as exc:
            raise LabError(
                f"lab up failed: {exc}",
                [*exc.details, f"remove what was created: `installer lab down --name {name}`"],
            ) from exc


def _create(
    plan: LabPlan, releases: list[str], inventory_path: Path | None, steps: _Steps
) -> LabInfo:
    bases = {r: _base_rootfs(r, steps) for r in dict.fromkeys(releases)}
    access = _access(plan.name)
    ensure_key_pair(access.key.parent, comment=f"installer-lab-{plan.name}")
    public_key = access.key.with_name(access.key.name + ".pub").read_text()
    hosts_dir = state.hosts_dir(plan.name)
    st = LabState(
        name=plan.name,
        subnet=str(plan.subnet),
        control_address=plan.control_address,
        bridge=plan.bridge,
        hosts=[
            HostRecord(
                name=h.name,
                address=h.address,
                netns=h.netns,
                veth=h.veth,
                rootfs=str(hosts_dir / h.name / "rootfs"),
                console_log=str(hosts_dir / h.name / "console.log"),
                release=release,
            )
            for h, release in zip(plan.hosts, releases, strict=True)
        ],
    )
    # Saved before anything exists, so `down` can always find what this run created.
    state.save(st)

    tasks = [steps.add(f"{h.name}: copying rootfs", total=2) for h in plan.hosts]
    host_keys = _parallel(
        lambda i: _prepare_host(
            bases[releases[i]], plan, plan.hosts[i], st.hosts[i], public_key, steps, tasks[i]
        ),
        range(len(plan.hosts)),
        COPY_WORKERS,
    )
    write_known_hosts(
        access.known_hosts, {h.address: keys for h, keys in zip(plan.hosts, host_keys, strict=True)}
    )

    network.create_bridge(plan, owner=state.lab_dir(plan.name))
    for host, record in zip(plan.hosts, st.hosts, strict=True):
        network.create_host_link(plan, host.netns, host.veth, host.address)
        record.pid = lab_hosts.boot(
            Path(record.rootfs), host.name, host.netns, Path(record.console_log)
        )
        state.save(st)

    def wait(i: int) -> None:
        record = st.hosts[i]
        assert record.pid is not None
        lab_hosts.wait_ready(
            record.name, record.address, record.pid, access, Path(record.console_log)
        )
        steps.finish(tasks[i], f"{record.name}: running at {record.address}")

    _parallel(wait, range(len(st.hosts)), len(st.hosts))
    return _finish_inventory(st, inventory_path)


def status(name: str = DEFAULT_NAME) -> list[HostStatus]:
    """One line per host of the lab (empty if there is no such lab)."""
    naming.validate_name(name)
    st = state.load(name)
    if st is None:
        return []
    access = _access(name)

    def one(record: HostRecord) -> HostStatus:
        alive = record.pid is not None and processes.is_nspawn_of(record.pid, Path(record.rootfs))
        ssh_ok, system_state = lab_hosts.probe(record.address, access) if alive else (False, "")
        return HostStatus(record.name, record.address, record.pid, alive, ssh_ok, system_state)

    return _parallel(one, st.hosts, len(st.hosts))


def _host_dirs(name: str) -> list[Path]:
    root = state.hosts_dir(name)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


@dataclass
class DownTimes:
    """Where `lab down` spent its time: each step, and each host's stop (they run at once)."""

    steps: dict[str, float] = field(default_factory=dict)
    hosts: dict[str, tuple[str, float]] = field(default_factory=dict)  # rootfs: (outcome, seconds)

    def describe(self) -> str:
        hosts = ", ".join(f"{Path(r).parent.name} {o} in {s:.0f} s" for r, (o, s) in sorted(self.hosts.items()))
        return "; ".join(
            f"{step} {sec:.1f} s" + (f" ({hosts})" if step == "stop hosts" and hosts else "")
            for step, sec in self.steps.items()
        )


def down(name: str = DEFAULT_NAME) -> DownTimes:
    """Stop every host cleanly, then delete veths, namespaces, bridge and host root filesystems.

    Works from whatever exists: the state file if there is one, else names derived from the lab
    name and the host directories on disk (a half-created or hand-damaged lab). Hosts stop at
    once and their filesystems are removed at once; the result says what took the time.
    """
    times = DownTimes()
    step = time.monotonic()

    def lap(what: str) -> None:
        nonlocal step
        now = time.monotonic()
        times.steps[what] = round(now - step, 2)
        step = now

    naming.validate_name(name)
    _require_root("lab down")
    _require_tools(["ip", "ssh", "umount"])
    bridge = naming.bridge_name(name)
    here = state.lab_dir(name)
    with state.locked(name):
        owner = network.bridge_owner(bridge)
        if owner and owner != str(here) and not _orphaned(name, Path(owner)):
            raise LabError(
                f"bridge {bridge} belongs to the lab whose state is in {owner}: run "
                f"`installer lab down --name {name}` in that project; nothing was changed"
            )
        try:
            st = state.load(name)
        except LabError:
            st = None  # unreadable: fall back to what we find by name
        access = _access(name)
        addresses = {h.rootfs: h.address for h in st.hosts} if st else {}
        targets = {h.rootfs: h.pid for h in st.hosts if h.pid} if st else {}
        # nspawns the state file does not know about (it was lost, or up died mid-write).
        for proc in processes.nspawns_under(state.hosts_dir(name)):
            targets.setdefault(proc.rootfs, proc.pid)

        def stop(item: tuple[str, int | None]) -> str:
            root, pid = item
            began = time.monotonic()
            outcome = lab_hosts.stop(
                pid, Path(root), addresses.get(root, ""), access if root in addresses else None
            )
            times.hosts[root] = (outcome, round(time.monotonic() - began, 2))
            return outcome

        lap("prepare")
        outcomes = dict(zip(targets, _parallel(stop, targets.items(), len(targets)), strict=True))
        lap("stop hosts")
        still_running = {root for root, outcome in outcomes.items() if outcome == "still running"}

        control_ns.remove(name)  # an air-gap test's control namespace, if one was left
        for ns in network.lab_netns(name):
            # Anything still inside a host's namespace is ours; it must go before the namespace.
            processes.kill_pids(processes.pids_in_netns(network.NETNS_DIR / ns))
        for link in network.lab_links(name, bridge):
            network.delete_link(link)
        for ns in network.lab_netns(name):
            network.delete_netns(ns)
        lap("network")

        writers = processes.tool_processes_under(state.hosts_dir(name), _ROOTFS_WRITERS)
        processes.kill_pids([pid for pid, _argv in writers])
        # Each host's tree is GBs once a release is installed: removed all at once.
        roots = [r for d in _host_dirs(name) for r in sorted(d.glob("rootfs*")) if str(r) not in still_running]
        _parallel(rootfs.remove_tree, roots, len(roots))
        access.known_hosts.unlink(missing_ok=True)
        if not still_running:
            state.remove(name)
        lap("remove filesystems")

    left = leftovers(name)
    if left:
        raise LabError(f"lab {name!r} was not fully removed", left)
    return times


def _orphaned(name: str, owner: Path) -> bool:
    """True if another lab directory owns the bridge but that directory is gone and nothing runs
    in the lab's namespaces: its project was deleted (or ran in a container that has ended)
    while the lab was up, and only the network plumbing is left, which nobody else can remove."""
    if owner.exists():
        return False
    if any(processes.pids_in_netns(network.NETNS_DIR / ns) for ns in network.lab_netns(name)):
        return False
    log.warning("lab %r: its state %s is gone and nothing runs in it; removing what is left", name, owner)
    return True


def leftovers(name: str = DEFAULT_NAME) -> list[str]:
    """Everything of lab `name` still present on this machine; empty once `down` is done."""
    naming.validate_name(name)
    found = []
    namespaces = network.lab_netns(name)
    found += [f"network namespace {ns}" for ns in namespaces]
    found += [f"network link {link}" for link in network.lab_links(name, naming.bridge_name(name))]
    found += [
        f"process {p.pid}: systemd-nspawn -D {p.rootfs}"
        for p in processes.nspawns_under(state.hosts_dir(name))
    ]
    found += [
        f"process {pid}: {' '.join(argv)}"
        for pid, argv in processes.tool_processes_under(state.hosts_dir(name), _ROOTFS_WRITERS)
    ]
    for ns in namespaces:
        pids = processes.pids_in_netns(network.NETNS_DIR / ns)
        if pids:
            found.append(f"{len(pids)} processes in network namespace {ns} (e.g. PID {pids[0]})")
    found += control_ns.leftovers(name)
    found += [f"mount {m}" for m in processes.mounts_under(state.lab_dir(name))]
    found += [f"directory {d}" for host in _host_dirs(name) for d in sorted(host.glob("rootfs*"))]
    return found
