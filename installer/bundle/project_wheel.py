"""This project as a wheel: the gateway's code, which hosts install from the bundle with --no-deps.

From a checkout, pip builds it from the source tree. An installer installed from a wheel has no
source tree: its installed files are packed again as that wheel, each checked against the hash
its RECORD gives (a file changed since the install would otherwise reach every host unnoticed).
"""

import base64
import hashlib
import os
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from installer.base.errors import BundleError
from installer.base.paths import CHECKOUT
from installer.base.procs import run

DISTRIBUTION = "private-llm-installer"
# Written by the tool that installed the wheel, not part of it (RECORD is written anew).
_INSTALL_RECORDS = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}
# Fixed timestamps: the same installed files pack to the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def source_digest() -> str:
    """What the gateway wheel is made of, for the bundle's cache key."""
    digest = hashlib.sha256()
    if CHECKOUT is not None:
        for path in sorted([*(CHECKOUT / "service").rglob("*.py"), CHECKOUT / "pyproject.toml"]):
            digest.update(path.relative_to(CHECKOUT).as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()
    for name, sha256, _file in _installed_files(_distribution()):
        digest.update(f"{name}\0{sha256}\0".encode())
    return digest.hexdigest()


def build(dest: Path) -> Path:
    """Write the wheel into `dest` and return its path."""
    if CHECKOUT is not None:
        with tempfile.TemporaryDirectory(prefix="pli-wheel-build-") as scratch:  # no stale build/ (setup.py)
            run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(CHECKOUT)],
                timeout=600, env={**os.environ, "PLI_BUILD_BASE": scratch})
        (wheel,) = dest.glob("private_llm_installer-*.whl")
        _normalise(wheel)
        return wheel
    return _repack(dest)


def _normalise(wheel: Path) -> None:
    """Rewrite a built wheel with sorted entries and fixed timestamps. pip stamps the files with
    their mtimes and the metadata with the build time, so two builds of one source differ in
    bytes, and the wheel is part of the release id: without this, any bundle built again (a gray
    release's, a rebuilt cache) would look like new gateway code to the hosts."""
    with zipfile.ZipFile(wheel) as zf:
        contents = [(info.filename, zf.read(info)) for info in zf.infolist() if not info.is_dir()]
    tmp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(contents):
            zf.writestr(zipfile.ZipInfo(name, _ZIP_TIME), data, zipfile.ZIP_DEFLATED)
    tmp.replace(wheel)


def _distribution() -> metadata.Distribution:
    """The installed distribution this very code was loaded from (not another copy on the path)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        dist = None
    package_init = Path(__file__).resolve().parents[1] / "__init__.py"
    if dist is None or Path(str(dist.locate_file("installer/__init__.py"))).resolve() != package_init:
        raise BundleError(
            f"{package_init.parent} is neither a checkout nor an installed {DISTRIBUTION} wheel: "
            "the gateway wheel has no source",
            [f"install the installer from its wheel (`pip install {DISTRIBUTION}-*.whl`), or run it from a checkout"],
        )
    return dist


def _installed_files(dist: metadata.Distribution) -> list[tuple[str, str, Path]]:
    """(path in the wheel, its sha256 as RECORD writes it, the installed file) for every file the
    wheel brought; compiled bytecode and the console script, which the install made, are left out."""
    files = []
    for entry in dist.files or []:
        name = entry.as_posix()
        if (
            entry.hash is None
            or name.startswith("../")
            or "__pycache__" in entry.parts
            or (entry.parts[0].endswith(".dist-info") and entry.name in _INSTALL_RECORDS)
        ):
            continue
        if entry.hash.mode != "sha256":
            raise BundleError(f"{DISTRIBUTION}'s RECORD hashes {name} with {entry.hash.mode}, not sha256")
        files.append((name, entry.hash.value, Path(str(dist.locate_file(entry)))))
    if not any(name.startswith("service/") for name, _sha, _file in files):
        raise BundleError(
            f"the installed {DISTRIBUTION} lists no service/ files in its RECORD",
            [f"reinstall it from its wheel: `pip install --force-reinstall --no-deps {DISTRIBUTION}-*.whl`"],
        )
    return sorted(files)


def _b64_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_name(dist: metadata.Distribution) -> str:
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    if not tags:
        raise BundleError(f"the installed {DISTRIBUTION} has no WHEEL file naming its tags; reinstall it from a wheel")
    # Several tags compress into one name: py3.py2-none-any
    parts = [".".join(dict.fromkeys(tag.split("-")[i] for tag in tags)) for i in range(3)]
    return f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{'-'.join(parts)}.whl"


def _repack(dest: Path) -> Path:
    dist = _distribution()
    contents: list[tuple[str, bytes]] = []
    changed = []
    for arcname, sha256, path in _installed_files(dist):
        data = path.read_bytes()
        if _b64_sha256(data) != sha256:
            changed.append(arcname)
        contents.append((arcname, data))
    if changed:
        raise BundleError(
            f"{len(changed)} installed file(s) of {DISTRIBUTION} differ from the hashes in its RECORD; "
            "the gateway wheel is not built from changed files",
            [*changed[:10], f"reinstall it: `pip install --force-reinstall --no-deps {DISTRIBUTION}-*.whl`"],
        )
    dist_info = next(name.split("/")[0] for name, _data in contents if name.split("/")[0].endswith(".dist-info"))
    record = [f"{name},sha256={_b64_sha256(data)},{len(data)}" for name, data in contents]
    contents.append((f"{dist_info}/RECORD", "\n".join([*record, f"{dist_info}/RECORD,,", ""]).encode()))
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / _wheel_name(dist)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in contents:
            zf.writestr(zipfile.ZipInfo(name, _ZIP_TIME), data, zipfile.ZIP_DEFLATED)
    return out
