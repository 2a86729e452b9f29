"""Finding and stopping a lab's processes by PID, and the mounts under its directories.

Everything here reads /proc directly: we only ever signal a PID after checking that it is
still the systemd-nspawn of one of our root filesystems (PIDs get reused), and never match
processes by a broad name.
"""

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


def _pids() -> Iterator[int]:
    """Every process id /proc lists now (one may be gone by the time it is read)."""
    return (int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit())


def _reap(pid: int) -> None:
    # A host booted by this very process stays our child: collect it once it has exited, or it
    # lingers as a zombie that still looks present in /proc.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_running(pid: int) -> bool:
    _reap(pid)
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state letter follows the parenthesised command name, which may itself contain ")".
    return stat[stat.rindex(")") + 2] not in "ZX"


def cmdline(pid: int) -> list[str]:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def nspawn_rootfs(argv: list[str]) -> str | None:
    """The -D/--directory of a systemd-nspawn command line, or None if it is not one."""
    if not argv or os.path.basename(argv[0]) != "systemd-nspawn":
        return None
    for i, arg in enumerate(argv):
        if arg in ("-D", "--directory") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--directory="):
            return arg.split("=", 1)[1]
    return None


def is_nspawn_of(pid: int, rootfs: Path) -> bool:
    return is_running(pid) and nspawn_rootfs(cmdline(pid)) == str(rootfs)


@dataclass(frozen=True)
class NspawnProcess:
    pid: int
    rootfs: str


def nspawns_under(directory: Path) -> list[NspawnProcess]:
    """Every running systemd-nspawn whose root filesystem lies under `directory`."""
    prefix = str(directory).rstrip("/") + "/"
    found = []
    for pid in _pids():
        rootfs = nspawn_rootfs(cmdline(pid))
        if rootfs and rootfs.startswith(prefix) and is_running(pid):
            found.append(NspawnProcess(pid, rootfs))
    return found


def tool_processes_under(
    directory: Path, tools: tuple[str, ...] | None
) -> list[tuple[int, list[str]]]:
    """Running `tools` (by program name; None: any program) with an argument under `directory`.

    A `lab up` killed by SIGTERM leaves its `cp -a` running, still writing a host's rootfs;
    `down` must stop that before it can delete the directory.
    """
    prefix = str(directory).rstrip("/") + "/"
    found = []
    for pid in _pids():
        argv = cmdline(pid)
        if not argv or (tools is not None and os.path.basename(argv[0]) not in tools):
            continue
        touches = any(a == prefix[:-1] or a.startswith(prefix) for a in argv[1:])
        if touches and is_running(pid):
            found.append((pid, argv))
    return found


def pids_in_netns(netns_file: Path) -> list[int]:
    """Processes whose network namespace is the one bound at `netns_file` (/run/netns/NAME)."""
    try:
        target = os.stat(netns_file)
    except FileNotFoundError:
        return []
    found = []
    for pid in _pids():
        try:
            ns = os.stat(_PROC / str(pid) / "ns" / "net")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino) and is_running(pid):
            found.append(pid)
    return found


def wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def terminate(pid: int, rootfs: Path, *, term_timeout: float, kill_timeout: float = 10) -> str:
    """SIGTERM, then SIGKILL after `term_timeout`; only while `pid` is still nspawn of `rootfs`.

    systemd-nspawn -b answers SIGTERM with an orderly shutdown of the container (SIGRTMIN+3 to
    its init), so SIGKILL is only the last resort. Returns how the process ended.
    """
    for sig, timeout in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, kill_timeout)):
        if not is_nspawn_of(pid, rootfs):
            return "exited"
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return "exited"
        if wait_exit(pid, timeout):
            return f"stopped by {sig.name}"
    return "still running"


def kill_pids(pids: list[int], timeout: float = 10) -> None:
    """SIGKILL processes we already identified as ours (left in a lab netns), and wait."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        wait_exit(pid, timeout)


def _unescape_mount_path(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mount_points(mountinfo: str) -> list[str]:
    return [_unescape_mount_path(line.split()[4]) for line in mountinfo.splitlines() if line]


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below `directory` in our mount namespace, deepest first."""
    base = str(directory).rstrip("/")
    points = parse_mount_points((_PROC / "self" / "mountinfo").read_text())
    inside = [p for p in points if p == base or p.startswith(base + "/")]
    return sorted(set(inside), key=lambda p: p.count("/"), reverse=True)
