"""The one way the installer reaches its hosts outside Ansible and the bundle push: a command, or
a file written, on many hosts at once over the system `ssh` client.

- One SSH argv builder: installer/hosts/ssh.py's Target (batch mode, the deployment's known_hosts,
  strict host key checking, its identity only); the lab and Ansible take their options from it.
- One privilege rule: every command runs as root, as Ansible's tasks do (`become`); an SSH user
  other than root goes through `sudo -n` (preflight refused a host where it cannot).
- One fan-out: every host at once (a bounded pool), each host's own result, never one host's
  failure for all; `on_done` hears each host as it finishes, for progress.

Why the system client and not Fabric's ThreadingGroup (Fabric runs preflight, where its facts
parsing pays): the push streams tar through the same `ssh`, Ansible uses the same client, and
so a user's ssh_config (a bastion's ProxyJump, ControlMaster) applies to every connection alike;
a ThreadingGroup raises one GroupException for the batch, where the flows want each host's
result and a per-host deadline.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from installer.hosts.ssh import Target

T = TypeVar("T")
R = TypeVar("R")

TIMEOUT_S = 60.0
MAX_PARALLEL = 32
NO_ANSWER = 124  # the rc of a host that did not answer within its deadline (as timeout(1))


@dataclass(frozen=True)
class Result:
    host: str
    rc: int
    stdout: bytes
    stderr: str  # its last 300 characters
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def why(self) -> str:
        """One line for a message: stderr's last line, or the exit status."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit {self.rc}"


def as_root(t: Target, command: str) -> str:
    """`command` as the privilege rule runs it for `t`'s SSH user."""
    return command if t.user == "root" else "sudo -n sh -c " + shlex.quote(command)


def each(items: Sequence[T], fn: Callable[[T], R], limit: int = MAX_PARALLEL) -> list[R]:
    """fn over every item at once (a pool of at most `limit`), results in the items' order: the
    one fan-out of the flows, for SSH and for HTTP calls to the hosts' gateways alike."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(items)))) as pool:
        return list(pool.map(fn, items))


def run_one(t: Target, command: str, *, stdin: bytes = b"", timeout: float = TIMEOUT_S) -> Result:
    """`command` on `t` as root, `stdin` fed to it."""
    start = time.monotonic()
    argv = t.ssh_argv(as_root(t, command))
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Result(t.name, NO_ANSWER, b"", f"no answer within {timeout:g} s", timeout)
    return Result(t.name, p.returncode, p.stdout, p.stderr.decode(errors="replace").strip()[-300:],
                  round(time.monotonic() - start, 2))


def run(
    targets: Sequence[Target], command: str | Callable[[Target], str], *,
    stdin: bytes | Callable[[Target], bytes] = b"", timeout: float = TIMEOUT_S,
    on_done: Callable[[Result], None] | None = None,
) -> list[Result]:
    """`command` (or each host's own) on every target at once; one Result per target, in order."""
    def one(t: Target) -> Result:
        r = run_one(t, command(t) if callable(command) else command,
                    stdin=stdin(t) if callable(stdin) else stdin, timeout=timeout)
        if on_done is not None:
            on_done(r)
        return r

    return each(targets, one)


def write(targets: Sequence[Target], path: str, content: str, *, mode: str = "0644",
          timeout: float = TIMEOUT_S) -> list[Result]:
    """`content` into `path` on every target, as root and atomically (a temp file beside it,
    then a rename): a service re-reading it never sees half a file."""
    q = shlex.quote(path)
    command = f"umask 022 && cat > {q}.tmp && chmod {mode} {q}.tmp && mv -f {q}.tmp {q}"
    return run(targets, command, stdin=content.encode(), timeout=timeout)


def failures(results: Sequence[Result]) -> list[str]:
    """'host: why' for each result that failed."""
    return [f"{r.host}: {r.why}" for r in results if not r.ok]
