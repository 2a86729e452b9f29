"""What a release moves between: the stable spec of a model (the revision the hosts run) and the
canary spec (the inventory file's entry), and the plans built from them (plan.build's canaries)."""

from dataclasses import dataclass

from installer.inventory import Host, Inventory, ServedModel
from installer.planning import plan, plan_record
from installer.planning.plan import DeploymentPlan
from installer.release.state import Release, ReleaseError
from installer.state import revisions
from installer.state.revisions import Revision


def served(inv: Inventory, model: str, where: str) -> ServedModel:
    """The model entry `model` of `inv`; `where` says which inventory, for the error."""
    found = {m.name: m for m in inv.served_models()}
    if model not in found:
        raise ReleaseError(
            f"{where} has no model named {model}",
            [f"its models: {', '.join(found)}" if found else "it has no model",
             "--model takes the `name` of a `models:` entry (`main` for a single `model:`)"],
        )
    return found[model]


def stable_revision(deployment: str) -> Revision:
    """The revision every host runs now: what the canary runs beside, and what abort returns to."""
    running = set(revisions.host_revisions(deployment).values())
    if not running:
        raise ReleaseError(f"deployment {deployment} has no installed revision on record",
                           ["install it first with `installer up -i INVENTORY`"])
    if len(running) > 1:
        raise ReleaseError(
            f"the hosts of {deployment} run different revisions ({', '.join(map(str, sorted(running)))})",
            ["finish the upgrade or rollback first (`installer releases -i INVENTORY` shows who runs what)"],
        )
    return revisions.get(deployment, running.pop())


def other_changes(stable: Inventory, target: Inventory, model: str) -> list[str]:
    """What `target` changes against `stable` besides model `model`: the other models changed,
    added or removed, and the other sections. Models are compared as the plan deploys them
    (Inventory.served_models), so moving from a single `model:` to a `models:` list that names
    it `main` is no change, and a top-level `engine` change shows in the models it reaches. A
    release moves one model; everything else must already be what the hosts run."""
    if target.provider != "baremetal":  # cloud hosts come from Terraform: the file lists none
        target = target.model_copy(update={"hosts": stable.hosts})
    was = {m.name: m for m in stable.served_models()}
    now = {m.name: m for m in target.served_models()}
    changed = [f"model {n} {'added' if n not in was else 'changed'}"
               for n in now if n != model and was.get(n) != now[n]]
    changed += [f"model {n} removed" for n in was if n not in now]
    if not changed and list(was) != list(now):
        changed.append("the order of `models:` (the first is the primary)")
    old, new = stable.model_dump(mode="json"), target.model_dump(mode="json")
    for section in ("model", "models", "engine"):  # compared above, model by model
        old.pop(section, None)
        new.pop(section, None)
    changed += [f"`{key}`" for key in sorted({*old, *new}) if old.get(key) != new.get(key)]
    return changed


def same_spec(a: ServedModel, b: ServedModel) -> bool:
    return (a.model, a.task, a.engine, a.hosts) == (b.model, b.task, b.engine, b.hosts)


@dataclass(frozen=True)
class Sides:
    """A release's two revisions, read back from the state."""

    release: Release
    stable: Revision
    canary: Revision  # its inventory is the one the release moves to

    @property
    def stable_inv(self) -> Inventory:
        return self.stable.inventory()

    @property
    def target_inv(self) -> Inventory:
        return self.canary.inventory()

    def canary_spec(self) -> ServedModel:
        return served(self.target_inv, self.release.model, f"revision {self.canary.number}")

    def hosts(self) -> list[Host]:
        """The serving hosts that run the model (stable's or the canary's)."""
        inv = self.stable_inv
        names = set(served(inv, self.release.model, f"revision {self.stable.number}").hosts)
        names |= set(self.canary_spec().hosts)
        return [h for h in inv.hosts if h.name in names]

    def canary_engines(self) -> list[str]:
        """The canary's engine names on every host, as the gateways name them: read from the plan
        `release start` deployed (the canary revision keeps it), built again only for a release
        started before plans were kept."""
        rec = self.canary.plan_record()
        if rec is None:
            return sorted(n for names in engines_of(self.with_canary(), self.release.model, "canary").values()
                          for n in names)
        return sorted(e["name"] for h in rec["hosts"] for e in h["engines"]
                      if e["model"] == self.release.model and e["stage"] == "canary")

    def counted(self, p: DeploymentPlan) -> DeploymentPlan:
        """`p` with each host's CPUs as `release start`'s preflight counted them (the canary
        revision's plan keeps them), so each gateway's workers are the plan's number, as `up`
        gives them, not what the gateway role would make of its own nproc."""
        rec = self.canary.plan_record() or self.stable.plan_record()
        return p if rec is None else plan.with_cpu_counts(p, plan_record.cpu_counts(rec))

    def with_canary(self, base: Inventory | None = None) -> DeploymentPlan:
        """`base` (default stable) with the canary's engines beside the model's own."""
        return plan.build(base or self.stable_inv, {self.release.model: self.canary_spec()})


def sides(deployment: str, release: Release) -> Sides:
    return Sides(release, revisions.get(deployment, release.stable), revisions.get(deployment, release.canary))


def engines_of(dp: DeploymentPlan, model: str, stage: str) -> dict[str, list[str]]:
    """Engine names of `model` in `stage`, by host."""
    out: dict[str, list[str]] = {}
    for hp in dp.hosts:
        names = [n for n, e in zip(hp.engine_names, hp.engines, strict=True)
                 if e.model_key == model and e.stage == stage]
        if names:
            out[hp.name] = names
    return out


def every_engine(dp: DeploymentPlan) -> list[str]:
    return sorted(n for hp in dp.serving() for n in hp.engine_names)
