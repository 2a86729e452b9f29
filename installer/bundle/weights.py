"""The models a bundle carries, and where: the primary model at model/ with model.sha256 (the
layout of bundles made before several models, which keep working), every other served model at
models/<folder>/ with models/<folder>.sha256, <folder> being its folder on the hosts
(Model.dir_name). A gray release's canary whose weights are not stable's travels the same way
as models/<folder>.canary/: the hosts keep stable's folder untouched beside it, so an abort is
instant (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from installer.base.errors import BundleError
from installer.bundle.manifest import FileEntry, Manifest
from installer.inventory.weights_source import HostsSource, MirrorSource, WeightsSource, read_manifest
from installer.planning import engines
from installer.weights import verify as weights_verify

if TYPE_CHECKING:
    from installer.inventory import Inventory, ServedModel

PRIMARY_DIR = "model"
PRIMARY_CHECKSUMS = "model.sha256"
OTHERS_DIR = "models"
CANARY_SUFFIX = ".canary"
# The manifest's component of the folders whose weights the bundle names but does not carry:
# {folder: {"source": {"hosts": path} | {"mirror": url}, "size": bytes, "files": [entries]}}.
# Inside manifest.json, so the signature covers every path, size and sha256 (docs/weights.md).
BY_REFERENCE = "weights_by_reference"


@dataclass(frozen=True)
class Carried:
    """One weights folder of the bundle."""

    key: str  # the inventory's model name (`models[].name`; `main` for the single `model:`)
    served_name: str
    folder: str  # its folder under models/ on the hosts
    source: Path  # on this machine
    weights_from: WeightsSource = "bundle"  # model.source: the bundle, or a reference

    @property
    def by_reference(self) -> bool:
        return self.weights_from != "bundle"

    def bundle_dir(self, primary_folder: str) -> str:
        return bundle_dir(self.folder, primary_folder)

    def checksums(self, primary_folder: str) -> str:
        return checksums_file(self.folder, primary_folder)


def bundle_dir(folder: str, primary_folder: str) -> str:
    """Where a host folder's weights are inside the bundle (the model role applies the same rule)."""
    return PRIMARY_DIR if folder == primary_folder else f"{OTHERS_DIR}/{folder}"


def checksums_file(folder: str, primary_folder: str) -> str:
    return PRIMARY_CHECKSUMS if folder == primary_folder else f"{OTHERS_DIR}/{folder}.sha256"


def carried(inv: Inventory, canaries: Mapping[str, ServedModel] | None = None) -> list[Carried]:
    """Every weights folder the bundle carries, the primary model first; a canary's only when
    the plan gives it a folder of its own (engines.canary_dir: its engines read that folder)."""
    served = inv.served_models()
    found = [Carried(m.name, m.served_name, m.model.dir_name, m.model.path, m.model.source) for m in served]
    by_key = {m.name: m for m in served}
    for key, canary in sorted((canaries or {}).items()):
        stable = by_key.get(key)
        if stable is None:
            continue  # the plan refuses a canary of no model, before any bundle is pushed
        folder = engines.canary_dir(stable, canary)
        if folder != stable.model.dir_name:
            found.append(Carried(key, canary.served_name, folder, canary.model.path, canary.model.source))
    return found


def _fingerprint(model_dir: Path) -> list[tuple[str, int, int]]:
    # Size + mtime, not content: hashing hundreds of GB of weights for a cache lookup is too slow;
    # the content hash is computed once, when the bundle is built.
    return sorted(
        (p.relative_to(model_dir).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in model_dir.rglob("*")
        if p.is_file()
    )


def bundle_input(models: list[Carried]) -> list[dict[str, Any]]:
    """The bundle cache key's part for the weights: every folder's name and files (a folder by
    reference: its source, and its list's bytes when a manifest file gives it)."""
    found = []
    for c in models:
        entry: dict[str, Any] = {"key": c.key, "name": c.served_name, "folder": c.folder}
        given = _given_list(c)
        if given is not None:
            entry["list_sha256"] = hashlib.sha256(given.read_bytes()).hexdigest()
        else:
            entry["files"] = _fingerprint(c.source)
        if c.by_reference:
            entry["source"] = _source_json(c.weights_from)
        found.append(entry)
    return found


def _given_list(c: Carried) -> Path | None:
    return c.weights_from.manifest if isinstance(c.weights_from, HostsSource | MirrorSource) else None


def _source_json(source: WeightsSource) -> dict[str, str]:
    if isinstance(source, HostsSource):
        return {"hosts": source.hosts}
    if isinstance(source, MirrorSource):
        return {"mirror": source.mirror}
    raise ValueError("the bundle carries this folder's weights")


def files_of(models: list[Carried]) -> list[tuple[Path, str]]:
    """(source file, path inside the bundle) of every weights file the bundle carries."""
    primary = models[0].folder
    return [
        (src, f"{c.bundle_dir(primary)}/{src.relative_to(c.source).as_posix()}")
        for c in models
        if not c.by_reference
        for src in sorted(p for p in c.source.rglob("*") if p.is_file())
    ]


def by_reference(models: list[Carried]) -> dict[str, Any]:
    """The manifest's BY_REFERENCE component: each referenced folder's source and signed list,
    from its manifest file or hashed here from model.path (every core, weights/verify.py)."""
    found: dict[str, Any] = {}
    for c in models:
        if not c.by_reference:
            continue
        given = _given_list(c)
        try:
            files = read_manifest(given) if given is not None else weights_verify.describe(str(c.source))
        except ValueError as exc:  # validate read the list already; the folder may have changed since
            raise BundleError(f"the weights of {c.served_name} cannot be listed: {exc}") from None
        found[c.folder] = {
            "source": _source_json(c.weights_from),
            "size": sum(e["size"] for e in files),
            "files": sorted(files, key=lambda e: e["path"]),
        }
    return {BY_REFERENCE: found} if found else {}


def mirror_size(man: Manifest) -> int:
    """The bytes hosts fetch from mirrors (an upper bound for preflight's disk check)."""
    refs = man.components.get(BY_REFERENCE, {})
    return sum(int(r.get("size", 0)) for r in refs.values() if "mirror" in r.get("source", {}))


def components(models: list[Carried], files: list[FileEntry]) -> dict[str, Any]:
    """The manifest's `model` (the primary, as before) and `models` (the others, by folder)."""
    primary = models[0].folder

    def size(c: Carried) -> int:
        if c.by_reference:
            return 0  # none of its bytes travel in the bundle (BY_REFERENCE has its size)
        prefix = c.bundle_dir(primary) + "/"
        return sum(f.size for f in files if f.path.startswith(prefix))

    found: dict[str, Any] = {"model": {"name": models[0].served_name, "size": size(models[0])}}
    if len(models) > 1:
        found["models"] = {
            c.folder: {"key": c.key, "name": c.served_name, "size": size(c)} for c in models[1:]
        }
    return found


def write_checksums(root: Path, man: Manifest, models: list[Carried]) -> None:
    """Each folder's sha256sum list, paths relative to the folder (the model role checks the
    host's copy with it)."""
    primary = models[0].folder
    for c in models:
        if c.by_reference:
            continue  # its list is in the manifest itself (BY_REFERENCE)
        out = root / c.checksums(primary)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(man.checksums_text(prefix=c.bundle_dir(primary) + "/"))


def sbom_groups(models: list[Carried]) -> dict[str, str]:
    """Each folder's path prefix in the bundle and the served name the SBOM groups its files under."""
    primary = models[0].folder
    return {
        c.bundle_dir(primary) + "/": c.served_name + (" (canary)" if c.folder.endswith(CANARY_SUFFIX) else "")
        for c in models
    }


def served_name_of(path: str, man: Manifest) -> str | None:
    """The model a bundle file's weights belong to, by served name (a canary's as
    `<name> (canary)`), from the manifest; None when the file is no weights file."""
    top, _, rest = path.partition("/")
    if top == PRIMARY_DIR or path == PRIMARY_CHECKSUMS:
        model = man.components.get("model")
        return str(model.get("name", "model")) if isinstance(model, dict) else "model"
    if top != OTHERS_DIR or not rest:
        return None
    folder = rest.partition("/")[0] if "/" in rest else rest.removesuffix(".sha256")
    others = man.components.get("models")
    entry = others.get(folder) if isinstance(others, dict) else None
    name = str(entry.get("name", folder)) if isinstance(entry, dict) else folder
    return f"{name} (canary)" if folder.endswith(CANARY_SUFFIX) else name
