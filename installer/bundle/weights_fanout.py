"""The weights fan-out of one `up` (model.distribute: fanout, docs/weights.md, "Fan-out between
hosts"): the hosts that take part (those of the models fanned out: one set, the inventory
checks), the bundle folders that travel between them, which hosts the push leaves them to
(all but the first, the seed, so the control link carries them once), and what each host's
model role runs (installer/weights/fanout.py, host_runs).

The run id is the bundle's: the same bundle renders the same variables, so a converged `up`
stays converged; the token is the deployment's (secrets/secret_files.py), 0600 on this machine
and in the hosts' staging folder, never in an argv or a log."""

from typing import Any

from installer.bundle import weights as bundle_weights
from installer.bundle.manifest import Manifest
from installer.inventory import Inventory, ServedModel
from installer.inventory.topology import HOST_LAYOUT
from installer.weights import fanout


def fanned(inv: Inventory) -> list[ServedModel]:
    return [m for m in inv.served_models() if m.model.distribute == "fanout"]


def hosts(inv: Inventory) -> list[str]:
    """The fan-out's hosts in the order they are fed: the models' own (the same for all)."""
    models = fanned(inv)
    return list(models[0].hosts) if models else []


def folders(inv: Inventory) -> list[str]:
    """The bundle folders the fan-out moves ('model/', 'models/<dir>/')."""
    primary = inv.served_models()[0].model.dir_name
    return [bundle_weights.bundle_dir(m.model.dir_name, primary) + "/" for m in fanned(inv)]


def push_skips(inv: Inventory) -> dict[str, tuple[str, ...]]:
    """{host: folders}: what the push leaves to the fan-out, on every host but the seed."""
    order = hosts(inv)
    return {h: tuple(folders(inv)) for h in order[1:]} if len(order) > 1 else {}


def deadline(inv: Inventory, man: Manifest) -> fanout.Deadline | None:
    """The servers' deadline for this bundle's weights (fanout.Deadline): their bytes, the chain's
    hops and the lowest model.fanout_min_rate_mb_s of the models fanned out. None: no fan-out."""
    order = hosts(inv)
    if len(order) < 2:
        return None
    moved = tuple(folders(inv))
    sizes = [f.size for f in man.files if f.path.startswith(moved)]
    p = fanout.plan(order)
    return fanout.Deadline(sum(sizes), max(sizes, default=0), max(p.depth(h) for h in order) - 1,
                           min(m.model.fanout_min_rate_mb_s for m in fanned(inv)), fanout.WAIT_S)


def host_vars(inv: Inventory, man: Manifest, bundle_dir: str, token_src: str) -> dict[str, dict[str, Any]]:
    """{host: its role variables}: `model_fanout` (fanout.host_runs) and the token's file on
    this machine. Nothing for an inventory without a fan-out, or with one host."""
    order = hosts(inv)
    if len(order) < 2:
        return {}
    addresses = {h.name: h.address for h in inv.hosts if h.name in order}
    limit = deadline(inv, man)
    assert limit is not None  # two hosts or more
    runs = fanout.host_runs(fanout.plan(order), addresses, f"b{man.bundle_id[:12]}", folders(inv),
                            bundle_dir=bundle_dir, state_dir=HOST_LAYOUT["pli_state_dir"],
                            deadline_s=limit.seconds, wait_s=limit.wait_s)
    return {h: {"model_fanout": run, "model_fanout_token_src": token_src} for h, run in runs.items()}
