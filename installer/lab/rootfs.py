"""Root filesystems: one debootstrapped base per Debian release (cached), one private copy per host.

A lab host runs Debian 12 (bookworm) or Debian 13 (trixie), both from Debian's archive, so one
lab can be a mixed fleet. Each base is what a minimal real server has and nothing more: the product must ship what such
hosts lack (libnuma1, no compiler), so neither is added here. It is cached by a key over
everything that shapes it, and built in a temp dir that is renamed into place only when
complete, so an interrupted build never poisons the cache.
"""

import hashlib
import json
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from installer.base.errors import LabError
from installer.base.paths import cache_dir
from installer.base.procs import run
from installer.inventory import targets as os_targets
from installer.lab import processes

# Lab releases: the bundle targets (installer/inventory/targets.py) that are Debian's. The lab
# debootstraps from Debian's archive only, so no Ubuntu hosts.
RELEASES = {name: t.codename for name, t in os_targets.TARGETS.items() if t.os_id == "debian"}
DEFAULT_RELEASE = os_targets.DEFAULT
VARIANT = "minbase"
INCLUDE = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "sudo")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
_BUILD_PREFIX = ".build-"


def mirror() -> str:
    return os.environ.get("INSTALLER_DEBIAN_MIRROR") or DEFAULT_MIRROR


def architecture() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def cache_key(suite: str, variant: str, include: tuple[str, ...], mirror: str, arch: str) -> str:
    recipe = {
        "suite": suite,
        "variant": variant,
        "include": list(include),
        "mirror": mirror,
        "arch": arch,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def suite(release: str) -> str:
    """The archive suite of a lab release, or LabError naming the ones a lab can boot."""
    try:
        return RELEASES[release]
    except KeyError:
        raise LabError(
            f"a lab host cannot run {release!r}: lab hosts are built from Debian's archive; "
            f"use one of {', '.join(RELEASES)}"
        ) from None


def host_releases(releases: Sequence[str], hosts: int) -> list[str]:
    """Each host's release, in host order: one release for every host, or one per host."""
    for release in releases:
        suite(release)
    if len(releases) == 1:
        return list(releases) * hosts
    if len(releases) != hosts:
        raise LabError(
            f"--releases names {len(releases)} releases for {hosts} hosts: give one release for "
            f"all hosts, or one per host in host order (e.g. --releases {','.join(RELEASES)})"
        )
    return list(releases)


def debootstrap_argv(target: Path, mirror: str, arch: str, suite: str = RELEASES[DEFAULT_RELEASE]) -> list[str]:
    return [
        "debootstrap", f"--variant={VARIANT}", f"--arch={arch}", f"--include={','.join(INCLUDE)}",
        suite, str(target), mirror,
    ]  # fmt: skip


def cached_base(release: str = DEFAULT_RELEASE) -> Path:
    """Where the base rootfs of a release for the current recipe lives (it may not be built yet)."""
    key = cache_key(suite(release), VARIANT, INCLUDE, mirror(), architecture())
    return cache_dir() / "rootfs" / key / "rootfs"


def ensure_base(release: str = DEFAULT_RELEASE, on_line: Callable[[str], None] | None = None) -> Path:
    """The cached base rootfs of a release, debootstrapping it first if needed (about a minute)."""
    base = cached_base(release)
    if base.is_dir():
        return base
    final = base.parent
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(final.parent)
    build = final.parent / f"{_BUILD_PREFIX}{final.name}-{os.getpid()}"
    remove_tree(build)
    build.mkdir()
    try:
        _debootstrap(build, suite(release), on_line)
        # Downloaded .debs are 50 MB per copy that no host needs.
        for deb in (build / "rootfs" / "var" / "cache" / "apt" / "archives").glob("*.deb"):
            deb.unlink()
        (build / "recipe.json").write_text(
            json.dumps(
                {
                    "suite": suite(release),
                    "variant": VARIANT,
                    "include": list(INCLUDE),
                    "mirror": mirror(),
                    "arch": architecture(),
                    "built": time.time(),
                },
                indent=2,
            )
        )
        try:
            os.rename(build, final)
        except OSError:
            if not base.is_dir():  # not a concurrent build that finished first
                raise
    finally:
        remove_tree(build)
    return base


def _debootstrap(build: Path, suite: str, on_line: Callable[[str], None] | None) -> None:
    argv = debootstrap_argv(build / "rootfs", mirror(), architecture(), suite)
    # If we die (SIGTERM, SIGKILL), debootstrap must not go on filling a build nobody will use.
    argv = ["setpriv", "--pdeathsig", "TERM", *argv]
    log_path = build / "debootstrap.log"
    tail: list[str] = []
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail = [*tail[-19:], line.rstrip()]
                if on_line:
                    on_line(line.rstrip())
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    if proc.returncode != 0:
        raise LabError(
            f"debootstrap of {suite} failed (exit {proc.returncode}) from {mirror()}; "
            "set INSTALLER_DEBIAN_MIRROR to a Debian mirror this machine can reach",
            tail,
        )


def _remove_stale_builds(root: Path) -> None:
    """Delete temp builds whose builder died (an interrupted `lab up`).

    A builder killed on its own leaves debootstrap running: such a build is left alone until
    that debootstrap is gone too.
    """
    for build in root.glob(f"{_BUILD_PREFIX}*"):
        match = re.search(r"-(\d+)$", build.name)
        if not match or processes.is_running(int(match.group(1))):
            continue
        if not processes.tool_processes_under(build, None):
            remove_tree(build)


def copy_rootfs(base: Path, dest: Path) -> None:
    """A private copy of the base for one host (its own /etc, /var, host keys...)."""
    tmp = dest.with_name(dest.name + ".tmp")
    remove_tree(tmp)
    remove_tree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", "--reflink=auto", str(base), str(tmp)])
    os.rename(tmp, dest)


def hosts_file(lab_hosts: list[tuple[str, str]]) -> str:
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "ff02::1\tip6-allnodes",
        "ff02::2\tip6-allrouters",
        "",
        "# lab hosts",
    ]
    lines += [f"{address}\t{name}" for name, address in lab_hosts]
    return "\n".join(lines) + "\n"


def personalise(
    rootfs: Path, hostname: str, lab_hosts: list[tuple[str, str]], authorized_key: str
) -> None:
    """Host name, /etc/hosts naming every lab host, and the lab key allowed to log in as root."""
    (rootfs / "etc" / "hostname").write_text(hostname + "\n")
    (rootfs / "etc" / "hosts").write_text(hosts_file(lab_hosts))
    ssh_dir = rootfs / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(authorized_key.strip() + "\n")
    os.chmod(keys, 0o600)
    # Units with nothing to do in a container, which on a loaded machine fail their start (seen in
    # CI and in parallel labs), leaving systemd "degraded" for no reason that matters here:
    # utmp runlevel records; remounting the root per fstab (the lab has none; nspawn mounts /);
    # static /dev nodes (nspawn populates /dev itself).
    for unit in (
        "systemd-update-utmp-runlevel.service",
        "systemd-remount-fs.service",
        "systemd-tmpfiles-setup-dev.service",
    ):
        mask = rootfs / "etc" / "systemd" / "system" / unit
        mask.unlink(missing_ok=True)
        mask.symlink_to("/dev/null")


def remove_tree(path: Path) -> None:
    """rm -rf that never crosses into a mounted filesystem (debootstrap mounts /proc, /sys)."""
    if not path.exists() and not path.is_symlink():
        return
    for point in processes.mounts_under(path):
        if run(["umount", point], check=False).returncode != 0:
            run(["umount", "--lazy", point], check=False)
    left = processes.mounts_under(path)
    if left:
        raise LabError(f"cannot delete {path}: still mounted", left)
    if path.is_dir() and not path.is_symlink():
        unlink_files(path)
    run(["rm", "-rf", "--one-file-system", str(path)])  # the directories, and anything left


def unlink_files(root: Path, workers: int = 8) -> None:
    """Unlink every non-directory under `root` with `workers` threads side by side, leaving the
    directories; never follows a symlink or enters another filesystem. A host's tree is
    100,000s of files and each unlink waits on the disk's journal: on a busy disk several at
    once finish several times sooner than `rm -rf`'s one at a time (benchmarks/tree_removal.py).
    Errors are left to the `rm -rf` that follows, which names them."""
    device = os.lstat(root).st_dev
    dirs: queue.Queue[str | None] = queue.Queue()
    dirs.put(str(root))

    def work() -> None:
        while (d := dirs.get()) is not None:
            try:
                with os.scandir(d) as entries:
                    for e in entries:
                        try:
                            if not e.is_dir(follow_symlinks=False):
                                os.unlink(e.path)
                            elif e.stat(follow_symlinks=False).st_dev == device:
                                dirs.put(e.path)
                        except OSError:
                            pass
            except OSError:
                pass
            finally:
                dirs.task_done()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    dirs.join()
    for _ in threads:
        dirs.put(None)
    for t in threads:
        t.join()
