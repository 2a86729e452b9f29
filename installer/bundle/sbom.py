"""The bundle's software bill of materials: sbom.cdx.json, CycloneDX JSON, written at build time.

It names every third-party file a bundle carries -- each wheel, each .deb of every target, the
binaries (uv, terraform and its providers, the monitoring tarballs) and each file of every model --
with its version, sha256, licence where the package states one, and a package URL. It is written
before the manifest, so manifest.json lists it and the bundle's signature covers it.

Each component's bom-ref is its path in the bundle (unique, and what a reader checks against the
manifest: `bundle verify` refuses an SBOM that leaves out a file it should name, or names one with
other bytes, name or version, `coverage_problems`). The SBOM is derived from the other files, so it
is not part of the release identity (manifest.DERIVED_FILES).
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import uuid
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import License
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from installer import __version__
from installer.base.errors import BundleError, InstallerError
from installer.bundle import deb_licence, monitoring_tarballs
from installer.bundle.contents import Change
from installer.bundle.manifest import SBOM, FileEntry, Manifest
from installer.inventory import targets as os_targets

PATH_PROPERTY = "private-llm-installer:path"
KIND_PROPERTY = "private-llm-installer:kind"
# What the SBOM lists: everything else (playbooks, indexes, lists) is ours or derived.
LISTED_PREFIXES = ("wheels/", "debs/", "targets/", "tools/", "terraform/", "monitoring/", "model/", "models/")


@dataclass(frozen=True)
class Entry:
    """One SBOM component as `installer bundle sbom --format table` and `bundle diff` read it."""

    kind: str
    name: str
    version: str
    licence: str
    path: str
    sha256: str


def _licences(values: Iterable[str]) -> list[License]:
    factory = LicenseFactory()
    found: list[License] = []
    for value in values:
        value = value.strip()
        if value and value.upper() != "UNKNOWN":
            found.append(factory.make_from_string(value))
            break  # one statement: the most precise the package gives
    return found


def wheel_licence(whl: Path) -> list[License]:
    """The licence a wheel's METADATA states: License-Expression, else License, else classifiers."""
    try:
        with zipfile.ZipFile(whl) as zf:
            name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                return []
            meta = email.parser.HeaderParser().parsestr(zf.read(name).decode("utf-8", "replace"))
    except (zipfile.BadZipFile, OSError) as exc:
        raise BundleError(f"{whl.name} is not a readable wheel: {exc}",
                          ["delete it from the download cache and build again"]) from exc
    expression = meta.get("License-Expression") or ""
    # License is free text, sometimes the whole licence: its first line names it, when short.
    free = (meta.get("License") or "").strip().split("\n")[0]
    free = free if len(free) <= 100 else ""
    classifiers = [
        c.split("::")[-1].strip()
        for c in meta.get_all("Classifier") or []
        if c.startswith("License ::") and c.split("::")[-1].strip() not in ("OSI Approved",)
    ]
    return _licences([expression, free, *classifiers])


def _component(
    kind: str, ctype: ComponentType, name: str, version: str, path: str, sha256: str,
    purl: PackageURL | None = None, licences: list[License] | None = None, group: str | None = None,
) -> Component:
    return Component(
        type=ctype, name=name, version=version or None, group=group, bom_ref=path, purl=purl,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)],
        licenses=licences or [],
        properties=[Property(name=PATH_PROPERTY, value=path), Property(name=KIND_PROPERTY, value=kind)],
    )


def _deb_purl(path: str, name: str, version: str) -> PackageURL:
    parts = path.split("/")
    target = parts[1] if parts[0] == "targets" else "debian-12"  # legacy bundles: one debian-12
    arch = Path(path).stem.rpartition("_")[2]
    qualifiers = {"arch": arch}
    vendor = target.split("-")[0]
    try:
        t = os_targets.get(target)
        qualifiers["distro"] = t.codename
        vendor = t.os_id
    except InstallerError:  # a target this installer no longer knows: no distro qualifier
        pass
    return PackageURL(type="deb", namespace=vendor, name=name, version=version, qualifiers=qualifiers)


def _deb_fields(path: str, packages: list[dict[str, str]]) -> tuple[str, str]:
    for entry in packages:
        if entry.get("file") == path:
            return entry["name"], entry["version"]
    package, _, tail = Path(path).name.removesuffix(".deb").partition("_")
    return package, tail.rpartition("_")[0].replace("%3a", ":")


def _components(
    root: Path, paths: list[Path], hashes: dict[Path, str],
    versions: dict[str, Any], packages: list[dict[str, str]], groups: Mapping[str, str],
) -> list[Component]:
    tarballs = {
        f"{monitoring_tarballs.BUNDLE_DIR}/{t.path.name}": t
        for t in monitoring_tarballs.find(root / monitoring_tarballs.BUNDLE_DIR)[0].values()
    } if (root / monitoring_tarballs.BUNDLE_DIR).is_dir() else {}
    terraform = versions.get("terraform") if isinstance(versions.get("terraform"), dict) else {}
    assert isinstance(terraform, dict)
    found: list[Component] = []
    for p in paths:
        rel, digest = p.relative_to(root).as_posix(), hashes[p]
        top = rel.split("/")[0]
        if top == "wheels" and rel.endswith(".whl"):
            try:
                dist, wheel_version, _build, _tags = parse_wheel_filename(p.name)
            except InvalidWheelFilename as exc:
                raise BundleError(f"{rel}: not a valid wheel file name ({exc})") from exc
            purl = PackageURL(type="pypi", name=str(dist), version=str(wheel_version))
            found.append(_component("wheel", ComponentType.LIBRARY, str(dist), str(wheel_version), rel,
                                    digest, purl, wheel_licence(p)))
        elif top in ("debs", "targets") and rel.endswith(".deb"):
            name, version = _deb_fields(rel, packages)
            stated = deb_licence.of_deb(p, name)
            # One licence as the SBOM's statement: the Files: * one, or all of them joined.
            licences = _licences([stated[0] if len(stated) == 1 else " AND ".join(f"({s})" for s in stated)])
            found.append(_component("deb", ComponentType.LIBRARY, name, version, rel, digest,
                                    _deb_purl(rel, name, version), licences))
        elif top == "tools":
            tool = rel.split("/")[1]
            found.append(_component("tool", ComponentType.APPLICATION, tool,
                                    str(versions.get(tool, "")), rel, digest))
        elif top == "terraform":
            parts = rel.split("/")
            if parts[1] == "plugins" and len(parts) >= 7:  # plugins/<host>/<ns>/<type>/<version>/...
                name, version = f"{parts[3]}/{parts[4]}", parts[5]
            else:
                name, version = parts[-1], str(terraform.get(parts[-1], ""))
            found.append(_component("tool", ComponentType.APPLICATION, name, version, rel, digest))
        elif rel in tarballs:
            t = tarballs[rel]
            found.append(_component("tool", ComponentType.APPLICATION, t.component, t.version, rel, digest))
        elif (prefix := next((g for g in groups if rel.startswith(g)), None)) is not None:
            found.append(_component("model", ComponentType.DATA, rel.removeprefix(prefix), "", rel,
                                    digest, group=groups[prefix]))
    return found


def build(
    root: Path, files: list[FileEntry], versions: dict[str, Any], packages: list[dict[str, str]],
    model_name: str, groups: Mapping[str, str] | None = None,
) -> str:
    """The SBOM of the bundle directory `root` as CycloneDX 1.6 JSON; `files`: its files with their
    sha256, as manifest.scan found them (the weights are not hashed a second time). Weights are
    grouped by model: `groups` maps a folder's prefix in the bundle to its served name; without
    it, model/ is `model_name`'s."""
    groups = dict(groups) if groups else {"model/": model_name}
    listed = sorted((f for f in files if f.path.startswith(LISTED_PREFIXES)), key=lambda f: f.path)
    paths = [root / f.path for f in listed]
    hashes = {root / f.path: f.sha256 for f in listed}
    components = _components(root, paths, hashes, versions, packages, groups)
    digest = hashlib.sha256()
    for f in listed:
        digest.update(f"{f.path}\0{f.sha256}\n".encode())
    # The same contents give the same serial number, so an identical rebuild is recognisable.
    bom = Bom(serial_number=uuid.UUID(bytes=digest.digest()[:16], version=4), components=components)
    bundle = Component(
        type=ComponentType.APPLICATION, name="private-llm-installer bundle", version=__version__,
        bom_ref="bundle",
    )
    bom.metadata.component = bundle
    bom.register_dependency(bundle, components)  # the bundle carries each; their own graph is unknown
    return JsonV1Dot6(bom).output_as_string(indent=1) + "\n"


def write(
    root: Path, files: list[FileEntry], versions: dict[str, Any], packages: list[dict[str, str]],
    model_name: str, groups: Mapping[str, str] | None = None,
) -> Path:
    """Write root/sbom.cdx.json (before the manifest is made, so the manifest lists it)."""
    out = root / SBOM
    out.write_text(build(root, files, versions, packages, model_name, groups))
    return out


def parse(data: bytes, where: Path) -> dict[str, Any]:
    """A bundle's SBOM bytes as a JSON document, or BundleError saying it is none."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise BundleError(f"{where}: {SBOM} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BundleError(f"{where}: {SBOM} is not a CycloneDX document")
    return doc


def must_list(path: str) -> bool:
    """Whether the SBOM names this bundle file, from its path alone: what _components lists (the
    wheels, the .debs of every target, the tools, Terraform's files, the monitoring tarballs and
    every weights file), not the installer's own lists, indexes and playbooks."""
    top, _, rest = path.partition("/")
    if top == "wheels":
        return path.endswith(".whl")
    if top in ("debs", "targets"):
        return path.endswith(".deb")
    if top == monitoring_tarballs.BUNDLE_DIR:
        return path.endswith(".tar.gz")
    if top == "models":
        return "/" in rest  # models/<folder>/<file>; models/<folder>.sha256 is the installer's list
    return top in ("tools", "terraform", "model") and bool(rest)


def _identity(path: str, man: Manifest) -> tuple[str, str] | None:
    """(name, version) a wheel's or .deb's component must carry, as build() derives them; None
    for the other files, whose names the SBOM takes from elsewhere (the bundle's own lists)."""
    if path.startswith("wheels/") and path.endswith(".whl"):
        try:
            dist, version, _build, _tags = parse_wheel_filename(Path(path).name)
        except InvalidWheelFilename:
            return None  # build() refuses such a file; a by-hand bundle still gets path and sha256 checked
        return str(dist), str(version)
    if path.endswith(".deb"):
        return _deb_fields(path, man.packages)
    return None


def _file_problem(f: FileEntry, listed: Entry | None, man: Manifest) -> str | None:
    if listed is None:
        return f"{f.path}: carried, but not in the SBOM"
    if listed.sha256 != f.sha256:
        return f"{f.path}: the SBOM has sha256 {listed.sha256[:12] or '(none)'}, the file {f.sha256[:12]}"
    want = _identity(f.path, man)
    if want is not None and (listed.name, listed.version) != want:
        return f"{f.path}: the SBOM names {listed.name} {listed.version}, the file is {want[0]} {want[1]}"
    return None


def coverage_problems(doc: dict[str, Any], man: Manifest) -> list[str]:
    """Where the SBOM `doc` does not describe what the manifest `man` carries, one line per file:
    a file it should name and does not (matched by path, its bom-ref), one it names with other
    bytes, or a wheel or .deb under another name or version; and a component of no carried file."""
    listed = {e.path: e for e in entries(doc)}
    problems = [
        problem for f in man.files if must_list(f.path)
        if (problem := _file_problem(f, listed.get(f.path), man)) is not None
    ]
    carried = {f.path for f in man.files}
    problems += [f"{path}: in the SBOM, but not carried" for path in sorted(listed.keys() - carried)]
    return problems


def entries(doc: dict[str, Any]) -> list[Entry]:
    """The components of a parsed SBOM, in file order."""
    found = []
    for c in doc.get("components", []):
        props = {p.get("name"): p.get("value", "") for p in c.get("properties", [])}
        sha = next((h["content"] for h in c.get("hashes", []) if h.get("alg") == "SHA-256"), "")
        licences = []
        for lic in c.get("licenses", []):
            if "expression" in lic:
                licences.append(lic["expression"])
            elif "license" in lic:
                licences.append(lic["license"].get("id") or lic["license"].get("name", ""))
        name = f"{c['group']}/{c['name']}" if c.get("group") else c["name"]
        found.append(Entry(props.get(KIND_PROPERTY, c.get("type", "")), name, c.get("version", ""),
                           ", ".join(licences), props.get(PATH_PROPERTY, c.get("bom-ref", "")), sha))
    return sorted(found, key=lambda e: e.path)


def diff(old: list[Entry], new: list[Entry]) -> list[Change]:
    """Components added, removed or at another version between two SBOMs (by kind and name).

    A name carried at several versions (two targets' wheels) compares as its set of versions.
    """
    def versions(found: list[Entry]) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for e in found:
            out.setdefault((e.kind, e.name), set()).add(e.version)
        return out

    o, n = versions(old), versions(new)
    changes = []
    for key in sorted(o.keys() | n.keys()):
        if key not in o:
            changes.append(Change("added", *key, "", ", ".join(sorted(n[key]))))
        elif key not in n:
            changes.append(Change("removed", *key, ", ".join(sorted(o[key])), ""))
        elif o[key] != n[key]:
            changes.append(Change("version", *key, ", ".join(sorted(o[key])), ", ".join(sorted(n[key]))))
    return changes
