"""Revisions: what was installed, from which bundle and inventory, and which host runs which.

A revision is one (bundle, inventory) pair that `installer up`/`upgrade` applied. A new bundle
or any inventory change (a vLLM setting, a gateway limit, a host added) is a new revision; the
same pair again is the same revision, so re-running `installer up` does not grow the history.

Control machine: `state.json` in the state folder (every revision of every deployment, which
revision each host runs, every run) and a snapshot per revision under `revisions/` there -- the
validated inventory (paths resolved), the bundle manifest and the playbooks -- which is all a
rollback needs besides the bundle, still held on the hosts. Hosts: `release.json` (written by
the `release` role) says what each host runs; `installer status` compares the two.
"""

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from installer.base.errors import InstallerError
from installer.base.paths import STATE_DIR_NAME, resolve_state_dir, state_dir
from installer.bundle.manifest import Manifest
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT
from installer.planning import plan_record

if TYPE_CHECKING:
    from installer.base.runlog import RunLog
    from installer.planning.plan import DeploymentPlan

HOST_RELEASE_FILE = f"{HOST_LAYOUT['pli_state_dir']}/release.json"


class StateError(InstallerError):
    """The control machine's record of revisions is missing what a command needs."""


@dataclass(frozen=True)
class Revision:
    deployment: str
    number: int
    bundle_id: str
    release_id: str
    config_digest: str
    created: str
    bundle_root: str  # where this machine held the bundle (the hosts hold their own copy)
    # A gray release's revision (installer/release/): the inventory is the one the release moves
    # to; the hosts run revision `canary_over` with the model `canary` beside it as that
    # inventory's entry says. Empty for a revision of `up`/`upgrade`.
    canary: str = ""
    canary_over: int = 0

    @property
    def snapshot(self) -> Path:
        return state_dir() / "revisions" / self.deployment / str(self.number)

    def inventory(self) -> Inventory:
        data = json.loads((self.snapshot / "inventory.json").read_text())
        if data.get("provider", "baremetal") == "baremetal":
            return Inventory.model_validate(data)
        # Cloud hosts came from Terraform (the model refuses them in a user's file).
        hosts = [Host.model_validate(h) for h in data.pop("hosts")]
        return Inventory.model_validate(data).model_copy(update={"hosts": hosts})

    def plan_record(self) -> dict[str, Any] | None:
        """The plan this revision was deployed with (None: made before plans were kept)."""
        return plan_record.read(self.snapshot)

    def manifest(self) -> Manifest:
        return Manifest.from_json((self.snapshot / "manifest.json").read_text())

    @property
    def playbooks_dir(self) -> Path:
        return self.snapshot / "playbooks"

    def host_vars(self) -> dict[str, Any]:
        """What the `release` role writes into each host's release.json, and what it keeps."""
        releases, bundles = kept_on_hosts(self.deployment, self)
        return {
            "release_revision": self.number,
            "release_config": self.config_digest,
            "release_bundle_id": self.bundle_id,
            "release_keep_releases": releases,
            "release_keep_bundles": bundles,
        }


KEEP_REVISIONS = 3  # the newest revisions whose release and bundle stay on the hosts


def kept_on_hosts(deployment: str, target: "Revision") -> tuple[list[str], list[str]]:
    """Release ids and host bundle directories the hosts keep: the target's, what each host will
    return to on `rollback` once it runs the target, and the newest few. The rest is removed:
    each release is a multi-GB engine environment.

    The list is what the hosts keep after this run, so the next run of the same target computes
    the same list (it is among the variables the converged fast path compares): a host on
    another revision keeps that one (it becomes its previous), a host on the target keeps its
    previous. Keeping what it ran before that one too would shrink the list on the next `up`
    and cost it a full configure."""
    from installer.bundle.push import HOST_BUNDLES

    dep = load()["deployments"].get(deployment, {})
    previous = dep.get("previous", {})
    wanted = {target.number}
    for host, running in dep.get("hosts", {}).items():
        wanted.add(previous.get(host) if running == target.number else running)
    wanted.discard(None)
    newest = sorted((r["number"] for r in dep.get("revisions", [])), reverse=True)[:KEEP_REVISIONS]
    kept = [r for r in revisions(deployment) if r.number in wanted | set(newest)] + [target]
    releases = sorted({r.release_id for r in kept})
    bundles = sorted({f"{HOST_BUNDLES}/{r.bundle_id[:24]}" for r in kept})
    return releases, bundles


def config_digest(inv: Inventory) -> str:
    return hashlib.sha256(inv.model_dump_json().encode()).hexdigest()[:12]


def _state_path() -> Path:
    return state_dir() / "state.json"


@contextmanager
def _locked() -> Iterator[dict[str, Any]]:
    """Read-modify-write of state.json under a lock; written atomically (never half a file)."""
    path = _state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.is_file() else {"deployments": {}}
        yield data
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)


def load() -> dict[str, Any]:
    path = _state_path()
    return json.loads(path.read_text()) if path.is_file() else {"deployments": {}}


def _deployment(data: dict[str, Any], name: str) -> dict[str, Any]:
    return data["deployments"].setdefault(name, {"revisions": [], "hosts": {}, "runs": []})


def revisions(deployment: str) -> list[Revision]:
    dep = load()["deployments"].get(deployment, {})
    return [Revision(**r) for r in dep.get("revisions", [])]


def host_revisions(deployment: str) -> dict[str, int]:
    """Which revision each host last passed its health gate with."""
    return dict(load()["deployments"].get(deployment, {}).get("hosts", {}))


def previous_revision(deployment: str) -> int | None:
    """The revision the hosts ran before their current one (what `rollback` returns to)."""
    dep = load()["deployments"].get(deployment, {})
    before = {dep.get("previous", {}).get(h) for h in dep.get("hosts", {})}
    before.discard(None)
    return max(before) if len(before) == 1 else None


def get(deployment: str, number: int) -> Revision:
    for rev in revisions(deployment):
        if rev.number == number:
            if not (rev.snapshot / "inventory.json").is_file():
                raise StateError(f"revision {number} of {deployment} has no snapshot in {rev.snapshot}")
            return rev
    known = ", ".join(str(r.number) for r in revisions(deployment)) or "none"
    raise StateError(
        f"deployment {deployment} has no revision {number} (known: {known})",
        ["`installer releases -i INVENTORY` lists them"],
    )


def next_revision(
    inv: Inventory, man: Manifest, root: Path, playbooks_dir: Path, *, above: int = 0,
    canary: str = "", canary_over: int = 0, deployment_plan: "DeploymentPlan | None" = None,
) -> Revision:
    """The revision for this (bundle, inventory): the existing one, or a new one with a snapshot.

    `above`: the highest revision adopted hosts reported (`up --adopt`), so a new number never
    repeats one those hosts already ran. `canary`, `canary_over`: a gray release's revision
    (the model `canary` of `inv` beside revision `canary_over`), never the same as `inv`'s own.
    `deployment_plan`: the plan the command built, kept in the snapshot (installer/planning/plan_record.py)."""
    digest = config_digest(inv)
    if canary:
        digest = hashlib.sha256(f"{digest} canary {canary} over {canary_over}".encode()).hexdigest()[:12]
    with _locked() as data:
        dep = _deployment(data, inv.deployment)
        for entry in dep["revisions"]:
            if entry["bundle_id"] == man.bundle_id and entry["config_digest"] == digest:
                # The same bytes, and the id as this installer names them: revisions recorded
                # while the weights were part of the release id say the id the hosts get now.
                entry["release_id"] = man.release_id
                rev = Revision(**entry)
                if (rev.snapshot / "inventory.json").is_file():
                    if deployment_plan is not None and plan_record.read(rev.snapshot) is None:
                        plan_record.write(rev.snapshot, deployment_plan)  # made before plans were kept
                    return rev
        number = max([above, *(r["number"] for r in dep["revisions"])]) + 1
        rev = Revision(
            deployment=inv.deployment, number=number, bundle_id=man.bundle_id,
            release_id=man.release_id, config_digest=digest,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), bundle_root=str(root),
            canary=canary, canary_over=canary_over,
        )
        _write_snapshot(rev, inv, man, playbooks_dir, deployment_plan)
        dep["revisions"] = [r for r in dep["revisions"] if r["number"] != number] + [asdict(rev)]
        return rev


def _write_snapshot(
    rev: Revision, inv: Inventory, man: Manifest, playbooks_dir: Path, deployment_plan: "DeploymentPlan | None"
) -> None:
    snap = rev.snapshot
    tmp = snap.with_name(snap.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # Only what the inventory set: the plan leaves unset engine sizing to the tuner, so a
    # revision reloaded for an upgrade or rollback must not see every default as set.
    (tmp / "inventory.json").write_text(inv.model_dump_json(indent=1, exclude_unset=True))
    (tmp / "manifest.json").write_text(man.to_json())
    if deployment_plan is not None:
        plan_record.write(tmp, deployment_plan)
    shutil.copytree(playbooks_dir, tmp / "playbooks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(snap, ignore_errors=True)
    tmp.rename(snap)


def record(
    deployment: str, rev: Revision, hosts_ok: dict[str, bool], log: "RunLog", command: str = ""
) -> None:
    """After a run: hosts that passed their gates now run `rev`; the run is listed."""
    with _locked() as data:
        dep = _deployment(data, deployment)
        for host, ok in hosts_ok.items():
            if ok:
                before = dep["hosts"].get(host)
                if before is not None and before != rev.number:
                    dep.setdefault("previous", {})[host] = before
                dep["hosts"][host] = rev.number
        dep["runs"].append({
            "command": command or log.command, "revision": rev.number, "run_dir": str(log.dir),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "hosts": hosts_ok,
        })
        dep["runs"] = dep["runs"][-200:]  # a long-lived deployment keeps a bounded history


class ReleaseInProgress(StateError):
    """A gray release of a model is under way: only `installer release ...` may change the hosts."""


def release_in_progress(deployment: str) -> dict[str, Any] | None:
    """The gray release under way (installer/release/state.py writes it), or None."""
    found = load()["deployments"].get(deployment, {}).get("release")
    return dict(found) if found else None


def set_release(deployment: str, release: dict[str, Any] | None) -> None:
    """Record the gray release under way (None: none is)."""
    with _locked() as data:
        dep = _deployment(data, deployment)
        if release is None:
            dep.pop("release", None)
        else:
            dep["release"] = release


def refuse_during_release(deployment: str, command: str) -> None:
    """`up` and `upgrade` would configure the hosts without the canary while the gateways still
    send it a share of the traffic: they wait until the release is promoted or aborted."""
    release = release_in_progress(deployment)
    if release is None:
        return
    model = release.get("model", "?")
    raise ReleaseInProgress(
        f"a gray release of model {model} is in progress on deployment {deployment} "
        f"(canary at {release.get('weight', 0)}%); `installer {command}` would undo it; nothing was changed",
        [f"finish it first: `installer release promote -i INVENTORY --model {model}` (to 100%, the "
         f"canary becomes the model) or `installer release abort -i INVENTORY --model {model}`",
         "`installer release status -i INVENTORY --model " + model + "` shows where it stands"],
    )


def forget_hosts(deployment: str, names: list[str]) -> None:
    """Hosts pruned from the deployment no longer run anything."""
    with _locked() as data:
        dep = _deployment(data, deployment)
        for name in names:
            dep["hosts"].pop(name, None)


@dataclass(frozen=True)
class Unknown:
    """A host whose release.json names a revision this control machine's state does not hold."""

    host: str
    reason: str
    revision: int = 0


def unknown_on_hosts(deployment: str, on_hosts: dict[str, str]) -> list[Unknown]:
    """Judge what each host says it runs (release.json's text, "" for none) against the state.

    A host that ran a revision this state never made means the state is not this deployment's
    (another folder, another machine): deploying from it would replace the hosts' client keys,
    CA and Redis password with its own."""
    known = {r.number: r for r in revisions(deployment)}
    found = []
    for host, text in sorted(on_hosts.items()):
        if not text.strip():
            continue  # never installed: nothing to lose
        try:
            record = json.loads(text)
            number = int(record["revision"])
        except (ValueError, TypeError, KeyError):
            found.append(Unknown(host, f"its {HOST_RELEASE_FILE} is not a release record: {text[:60]!r}"))
            continue
        other = record.get("deployment")
        bundle, config = str(record.get("bundle_id", "")), str(record.get("config", ""))
        ours = known.get(number)
        if other != deployment:
            found.append(Unknown(host, f"runs deployment {other!r}, not {deployment!r}", number))
        elif ours is None:
            found.append(Unknown(host, f"runs revision {number} (bundle {bundle[:12]}), unknown here", number))
        elif (ours.bundle_id, ours.config_digest) != (bundle, config):
            found.append(Unknown(
                host,
                f"runs revision {number} of bundle {bundle[:12]} (config {config}); revision "
                f"{number} here is bundle {ours.bundle_id[:12]} (config {ours.config_digest})",
                number,
            ))
    return found


def _working_directory_state(deployment: str) -> Path | None:
    """./.installer when it is not the state in use and holds the deployment: where state was
    kept before it moved next to the inventory, and the usual misplaced one."""
    folder = Path(STATE_DIR_NAME).resolve()
    if folder == resolve_state_dir()[0] or not (folder / "state.json").is_file():
        return None
    try:
        data = json.loads((folder / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return folder if data.get("deployments", {}).get(deployment, {}).get("revisions") else None


def unknown_state_error(deployment: str, unknown: list[Unknown], command: str = "up") -> StateError:
    """The refusal of `command` (up, keys create, ...) on hosts this state does not know."""
    folder, why = resolve_state_dir()
    fixes = [
        f"this state ({folder}, chosen by {why}) would replace their client keys, CA and Redis "
        "password with its own: every client key would stop working",
        *([f"{other} knows deployment {deployment}: `installer --state-dir {other} {command} ...`"]
          if (other := _working_directory_state(deployment)) else []),
        "use this deployment's state: run with the inventory that sits next to it, or pass "
        "`installer --state-dir DIR ...` (or INSTALLER_STATE_DIR)",
        f"or, to take these hosts over with this state anyway: `installer {command} --adopt ...`",
    ]
    return StateError(
        f"{len(unknown)} host(s) run a revision the state in {folder} does not know; "
        "nothing was changed",
        [f"{u.host}: {u.reason}" for u in unknown] + fixes,
    )
