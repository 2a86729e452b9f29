"""Run a command that dies, with every process it starts, with the installer that started it.

`python -I -S die_with_parent.py PARENT_PID PIDFILE -- COMMAND...`, run as ansible-runner's
child (its pexpect spawn takes no preexec function, so this is the step between fork and exec):
on Linux it asks the kernel for SIGTERM when the parent dies, even by SIGKILL
(prctl PR_SET_PDEATHSIG), records its PID for installer.base.procs.ChildGroup, and runs COMMAND as
its child in its own process group, which pexpect made a new session. A signal that ends it
(that SIGTERM, or one the installer passes on) goes to the whole group: ansible-playbook, its
workers and Mitogen's connection processes each get it, rather than ansible-playbook alone
passing it on (a SIGTERMed ansible-playbook under Mitogen took more than 15 s to take its
workers with it on a loaded machine). Its exit is the command's. Standard library only: it runs
before any of the installer is importable.
"""

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_ENDING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with_parent(parent: int) -> str | None:
    """PR_SET_PDEATHSIG for this process; a problem, or None."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return f"prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}"
    if os.getppid() != parent:  # the parent died before the request: no signal will come
        return "gone"
    return None


def _run(command: list[str]) -> int:
    me = os.getpid()  # the child's check must name us, even if we are gone before it runs
    child = os.fork()
    if child == 0:
        try:
            if _die_with_parent(me) is None:  # this supervisor killed outright: the command dies too
                os.execvp(command[0], command)
        except OSError as exc:
            print(f"{command[0]}: {exc}", file=sys.stderr)
        os._exit(127)
    passed_on: set[int] = set()

    def pass_on(signum: int, _frame: object) -> None:
        if signum in passed_on:  # the group's copy of our own signal, or the same one again
            return
        passed_on.add(signum)
        if os.getpgrp() == os.getpid():  # our group (pexpect's new session): all of it
            os.killpg(os.getpid(), signum)
        else:  # started in someone else's group: the command alone, never theirs
            os.kill(child, signum)

    for signum in _ENDING:
        # One the spawner made us ignore stays ignored (pexpect ignores SIGHUP, and the hangup of
        # a SIGKILLed installer's pty comes before the kernel's SIGTERM): the command ignores it too.
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, pass_on)
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):  # end as it ended, so the runner sees the same
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their action
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: die_with_parent.py PARENT_PID PIDFILE -- COMMAND...", file=sys.stderr)
        return 2
    parent, pidfile, command = int(argv[0]), argv[1], argv[3:]
    problem = _die_with_parent(parent)
    if problem == "gone":
        return 128 + signal.SIGTERM
    if problem:
        print(problem, file=sys.stderr)
        return 1
    tmp = f"{pidfile}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, pidfile)  # whole or absent for the reader
    return _run(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
