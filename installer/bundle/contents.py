"""What a bundle holds, by component, and what changes between two bundles (pure logic).

Both read the manifest alone -- a bundle of hundreds of GB is inspected in milliseconds --
so they describe what the manifest *says*; `installer bundle verify` checks the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from installer.bundle import weights
from installer.bundle.manifest import FileEntry, Manifest

# Display order of the kinds of component.
KINDS = ("model", "wheel", "tool", "deb", "playbooks", "index")


@dataclass(frozen=True)
class Component:
    kind: str
    name: str
    version: str


@dataclass
class ComponentSize:
    component: Component
    files: list[FileEntry] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def component_of(path: str, man: Manifest) -> Component:
    """The component a bundle file belongs to, with the version the manifest records for it."""
    top, _, rest = path.partition("/")
    if top == "targets":  # targets/<target>/debs/... and the target's lists: as at the top
        top, _, rest = rest.partition("/")[2].partition("/")
        if not rest:
            return Component("index", path, "")
    if top == "wheels" and rest.endswith(".whl"):
        try:
            dist, version, _build, _tags = parse_wheel_filename(rest)
            return Component("wheel", str(dist), str(version))
        except InvalidWheelFilename:
            return Component("wheel", rest, "")
    if top == "debs" and rest.endswith(".deb"):
        package, _, tail = rest.removesuffix(".deb").partition("_")
        return Component("deb", package, tail.rpartition("_")[0].replace("%3a", ":"))
    if top == "debs":
        return Component("index", "apt repository index", "")
    model_name = weights.served_name_of(path, man)
    if model_name is not None:  # model/ and models/<folder>/ with their sha256sum lists
        return Component("model", model_name, "")
    if top == "tools":
        tool = rest.partition("/")[0]
        return Component("tool", tool, str(man.components.get(tool, "")))
    if top == "playbooks":
        return Component("playbooks", "playbooks", str(man.components.get("playbooks", "")))
    return Component("index", path, "")


def by_component(man: Manifest) -> list[ComponentSize]:
    """Every component with its files, by kind (KINDS order), then largest first."""
    groups: dict[Component, ComponentSize] = {}
    for f in man.files:
        comp = component_of(f.path, man)
        groups.setdefault(comp, ComponentSize(comp)).files.append(f)

    def order(g: ComponentSize) -> tuple[int, int, str]:
        kind = g.component.kind
        return (KINDS.index(kind) if kind in KINDS else len(KINDS), -g.size, g.component.name)

    return sorted(groups.values(), key=order)


def size_by_kind(man: Manifest) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for g in by_component(man):
        sizes[g.component.kind] = sizes.get(g.component.kind, 0) + g.size
    return sizes


@dataclass(frozen=True)
class Change:
    """A component one bundle has and another lacks, or has in another version (sbom.diff)."""

    change: str  # "added", "removed", "version"; a ComponentChange's "changed": other files
    kind: str
    name: str
    old_version: str
    new_version: str


@dataclass(frozen=True)
class ComponentChange(Change):
    """A Change of the manifests' components, with their sizes."""

    old_size: int
    new_size: int


@dataclass
class BundleDiff:
    old: Manifest
    new: Manifest
    components: list[ComponentChange]
    added_files: list[FileEntry]
    removed_files: list[FileEntry]
    changed_files: list[FileEntry]  # as in the new bundle
    transfer_bytes: int  # what a push of `new` sends to a host that holds `old`

    @property
    def same_release(self) -> bool:
        return self.old.release_id == self.new.release_id


def diff(old: Manifest, new: Manifest) -> BundleDiff:
    """What upgrading hosts from `old` to `new` changes, and what it sends to each host.

    A host holding `old` hard-links every file of `new` whose sha256 it already has (whatever
    its path), so only content it lacks travels.
    """
    old_files = {f.path: f for f in old.files}
    new_files = {f.path: f for f in new.files}
    added = [f for p, f in sorted(new_files.items()) if p not in old_files]
    removed = [f for p, f in sorted(old_files.items()) if p not in new_files]
    changed = [
        f
        for p, f in sorted(new_files.items())
        if p in old_files and old_files[p].sha256 != f.sha256
    ]
    have = {f.sha256 for f in old.files}
    transfer = sum(f.size for f in new.files if f.sha256 not in have)

    def keyed(man: Manifest) -> dict[tuple[str, str], ComponentSize]:
        return {(g.component.kind, g.component.name): g for g in by_component(man)}

    old_c, new_c = keyed(old), keyed(new)
    changes = []
    for key in sorted(old_c.keys() | new_c.keys()):
        o, n = old_c.get(key), new_c.get(key)
        if o is None and n is not None:
            changes.append(ComponentChange("added", *key, "", n.component.version, 0, n.size))
        elif n is None and o is not None:
            changes.append(ComponentChange("removed", *key, o.component.version, "", o.size, 0))
        elif o is not None and n is not None:
            same = {(f.path, f.sha256) for f in o.files} == {(f.path, f.sha256) for f in n.files}
            if not same:
                changes.append(
                    ComponentChange(
                        "changed", *key, o.component.version, n.component.version, o.size, n.size
                    )
                )
    rank = {"removed": 0, "changed": 1, "added": 2}
    changes.sort(
        key=lambda c: (rank[c.change], KINDS.index(c.kind) if c.kind in KINDS else 99, c.name)
    )
    return BundleDiff(old, new, changes, added, removed, changed, transfer)
