"""Checks across an inventory's sections, run alike by `installer validate` and `installer up`.

The loader parses the file and checks each setting on its own and the paths it names; these
check that the settings agree with each other, that the certificates and tarballs they name
are usable, and that the model fits, so `validate` refuses whatever `up` would refuse before it
touches a host.
"""

from collections.abc import Iterator, Mapping

from installer.base.errors import InventoryError
from installer.bundle import layout as bundle_layout
from installer.bundle import monitoring_tarballs
from installer.inventory import Inventory, ServedModel, frontend_checks, jwks_file, tenant_checks
from installer.planning import plan
from installer.secrets import keys
from installer.tls import check as tls_check


def _gpus_per_host(inv: Inventory) -> tuple[int, str] | None:
    """(GPUs each host has, the setting that says so), when the inventory says."""
    if inv.gpu.count is not None:
        return inv.gpu.count, "gpu.count"
    if inv.cloud is not None and inv.cloud.gpu is not None:
        return inv.cloud.gpu.count, "cloud.gpu.count"
    return None


def _parallel(inv: Inventory) -> Iterator[str]:
    """Each model's tensor_parallel_size, where it is set (its own override, or the top level)."""
    found: list[str] = []
    for i, m in enumerate(inv.served_models()):
        own = inv.models is not None and inv.models[i].engine.tensor_parallel_size is not None
        loc: tuple[str | int, ...] = ("models", i, "engine", "tensor_parallel_size") if own else (
            "engine", "tensor_parallel_size")
        found += [p for p in _parallel_of(inv, m.engine.tensor_parallel_size, loc) if p not in found]
    yield from found


def _parallel_of(inv: Inventory, tp: int, loc: tuple[str | int, ...]) -> Iterator[str]:
    if tp == 1:
        return
    where = inv.where(*loc)
    if inv.engine.device == "cpu":
        yield f"{where}: {tp} with device cpu; a CPU engine is one process: set it to 1 or remove it"
        return
    known = _gpus_per_host(inv)
    if known is not None and tp > known[0]:
        count, key = known
        line = inv.line(*key.split("."))
        yield (
            f"{where}: {tp} is more than the {count} GPU(s) per host of {key}"
            + (f" (line {line})" if line else "")
            + f"; an engine's tensor parallel group stays on one host: set it to at most {count}"
        )


def _tenant_keys(inv: Inventory) -> Iterator[str]:
    """Each API key a tenant names against the key store `up` pushes: a name it does not hold
    (a typo, or a key not made yet) would leave the intended key on its own policy, silently.
    A revoked key's name passes: it authenticates nobody, and revoking a key must not block the
    next `up`. No store here (validate away from the control machine): nothing to check."""
    found = keys.names_in_store() if any(t.keys for t in inv.auth.tenants) else None
    if found is None:
        return
    store, names = found
    for i, tenant in enumerate(inv.auth.tenants):
        for j, key in enumerate(tenant.keys):
            if key not in names:
                yield (
                    f"{inv.where('auth', 'tenants', i, 'keys', j)}: API key {key!r} is not in the key store "
                    f"{store}; make it (`installer keys create --name {key}`) or correct the name "
                    "(`installer keys list` shows them)"
                )


def _named_files(inv: Inventory) -> Iterator[str]:
    """The certificates of tls.mode provided, the release tarballs of monitoring.tarballs_dir, the
    hosts' OS targets (os.packages_dirs, CPU engines on ubuntu-22.04), auth.jwt's JWKS file, and
    auth.tenants against the models served, and frontend's VIP against the hosts."""
    named = [*tls_check.provided(inv), *monitoring_tarballs.check(inv), *bundle_layout.inventory_problems(inv),
             *jwks_file.check(inv), *tenant_checks.check(inv), *frontend_checks.check(inv)]
    for loc, problem in named:
        yield f"{inv.where(*loc)}: {problem}"


def check_inventory(inv: Inventory, canaries: Mapping[str, ServedModel] | None = None) -> plan.DeploymentPlan:
    """The inventory's plan, built once it passed every cross-check. Raises InventoryError
    (settings that contradict each other or name unusable files, with file:line) or
    tuner.TuneError (the model does not fit the GPUs the inventory describes)."""
    problems = [*_parallel(inv), *_named_files(inv), *_tenant_keys(inv)]
    if problems:
        raise InventoryError(f"{len(problems)} problem(s) in the inventory", problems)
    return plan.build(inv, canaries)
