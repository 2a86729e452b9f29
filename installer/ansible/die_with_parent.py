"""Exec a command that dies with the installer that started it.

`python -I -S die_with_parent.py PARENT_PID PIDFILE -- COMMAND...`, run as ansible-runner's
child (its pexpect spawn takes no preexec function, so this is the step between fork and exec):
on Linux it asks the kernel for SIGTERM when the parent dies, even by SIGKILL
(prctl PR_SET_PDEATHSIG; ansible-playbook passes SIGTERM on to its workers), records its PID,
which the exec keeps, for installer.procs.ChildGroup, then becomes COMMAND. Standard library
only: it runs before any of the installer is importable.
"""

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: die_with_parent.py PARENT_PID PIDFILE -- COMMAND...", file=sys.stderr)
        return 2
    parent, pidfile, command = int(argv[0]), argv[1], argv[3:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            print(f"prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
            return 1
        if os.getppid() != parent:  # the installer died before the request: no signal will come
            return 128 + signal.SIGTERM
    tmp = f"{pidfile}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, pidfile)  # whole or absent for the reader
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
