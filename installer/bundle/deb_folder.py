"""A target's OS packages from a folder of .debs (`os.packages_dirs`), checked before they travel.

For a release whose archive the build machine cannot reach (Ubuntu's, from here), the user
fetches the packages on a machine that can (`apt-get download` of the packages and their
dependencies) and names the folder in the inventory. The build checks, before anything reaches
a host, that the folder holds every package the hosts of that target install by name and that
every dependency between them is met inside the folder, as gpu.packages_dir is checked (the
same check, gpu_packages.unmet), except dependencies on the packages every minimal system of
these releases already has.
"""

from __future__ import annotations

from pathlib import Path

from installer.base.errors import BundleError
from installer.bundle import aptrepo, gpu_packages

# Priority: required packages of Debian and Ubuntu (what debootstrap --variant=minbase and the
# Ubuntu base images hold): a dependency on these is met by every host already.
MINIMAL_SYSTEM = frozenset({
    "base-files", "base-passwd", "bash", "bsdutils", "coreutils", "dash", "debconf",
    "debianutils", "diffutils", "dpkg", "findutils", "gcc-12-base", "gcc-13-base", "gcc-14-base",
    "grep", "gzip", "hostname", "init-system-helpers", "libacl1", "libattr1", "libaudit1",
    "libaudit-common", "libblkid1", "libbz2-1.0", "libc-bin", "libc6", "libcap-ng0", "libcap2",
    "libcrypt1", "libdb5.3", "libdb5.3t64", "libgcc-s1", "libgcrypt20", "libgmp10",
    "libgpg-error0", "liblz4-1", "liblzma5", "libmd0", "libmount1", "libpam-modules",
    "libpam-modules-bin", "libpam-runtime", "libpam0g", "libpcre2-8-0", "libselinux1",
    "libsemanage2", "libsepol2", "libsmartcols1", "libstdc++6", "libsystemd0", "libtinfo6",
    "libudev1", "libuuid1", "libzstd1", "login", "mawk", "mount", "ncurses-base", "ncurses-bin",
    "passwd", "perl-base", "sed", "sysvinit-utils", "tar", "util-linux", "zlib1g",
})


def problems(index: list[dict[str, str]], names: list[str]) -> list[str]:
    """What is wrong with a folder (its apt index) for hosts that install `names`."""
    have = {p["Package"] for p in index}
    found = [f"{n} is missing (the hosts install it by name)" for n in names if n not in have]
    for line in gpu_packages.unmet(index):
        needed = line.split(" needs ", 1)[1]
        alternatives = [a.strip().split(" ")[0].split(":")[0] for a in needed.split("|")]
        if not any(a in MINIMAL_SYSTEM for a in alternatives):
            found.append(line)
    return found


def add(src: Path, debs_dir: Path, names: list[str], target: str) -> list[Path]:
    """Copy src's .debs into the target's repository folder after checking them; their paths."""
    where = f"os.packages_dirs.{target} ({src})"
    found = sorted(src.glob("*.deb")) if src.is_dir() else []
    if not found:
        raise BundleError(
            f"{where} has no .deb files",
            [f"on a machine that reaches the {target} archive: apt-get download {' '.join(names)} "
             "and their dependencies into it (docs/airgap.md)"],
        )
    wrong = problems(aptrepo.index_of(found, debs_dir.parent / ".deb-check"), names)
    if wrong:
        raise BundleError(
            f"{where} is not what the {target} hosts need",
            [*wrong[:20], "fix: add the missing packages (with apt-get download) to the folder"],
        )
    return aptrepo.copy_debs(found, debs_dir)
