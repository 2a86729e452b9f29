"""Several gateway workers on one listening socket: a supervisor that forks them and keeps them.

One asyncio process relays a few thousand streamed tokens a second before its event loop is
the bottleneck; a host with several GPUs streams far more. So with `workers: N` the supervisor
takes the socket (systemd's, or its own), makes the shared memory (service/shared.py) and a
fresh PROMETHEUS_MULTIPROC_DIR, and forks N workers, each a whole gateway (create_app) on that
socket; the kernel hands each new connection to one of them. The supervisor does no I/O:
  - SIGTERM/SIGINT are passed to every worker, which drains as a single gateway does, and the
    supervisor exits when they all have (the unit uses KillMode=mixed, so systemd signals only
    the supervisor and a worker never gets the signal twice — the second would cut its streams);
  - a worker that dies is replaced (its outstanding counts cleared, its gauge files dropped);
    if workers keep dying right after start, the supervisor gives up and exits 1 so systemd's
    Restart= takes over with a clean slate.
Workers are forked before any event loop, thread or client session exists; the app and its
metrics are built in each worker after the fork.
"""

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by main() only after prepare_metrics_dir(): it imports prometheus_client
    from service.shared import SharedState

log = logging.getLogger("service.prefork")

# A worker that dies sooner than this after starting counts towards giving up.
_EARLY_DEATH_S = 10.0
_MAX_EARLY_DEATHS = 5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def listening_socket(host: str, port: int) -> socket.socket:
    """What uvicorn would bind, made here so that every worker inherits the same socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock  # forked workers share it (inheritance only matters across exec)


def prepare_metrics_dir() -> Path:
    """A fresh directory for the workers' metric files, set before prometheus_client is
    imported (it picks its value store at import). Under systemd PrivateTmp=true it is the
    unit's own /tmp, emptied at every start."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set")
    path = Path(tempfile.mkdtemp(prefix="pli-gateway-metrics-"))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def _die_with(parent: int) -> None:
    """A supervisor killed outright (SIGKILL, OOM) would leave its workers serving with nobody to
    replace or stop them: the kernel sends each a SIGTERM — a drain — when it goes."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class Supervisor:
    def __init__(self, workers: int, shared: "SharedState", run_worker: Callable[[int], None]) -> None:
        self.workers = workers
        self.shared = shared
        self.run_worker = run_worker
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (worker index, start time)
        self.stopping = False
        self.early_deaths = 0

    def _spawn(self, index: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with(parent)
                self.shared.attach(index)
                self.run_worker(index)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.children[pid] = (index, time.monotonic())
        log.info("worker %d started (pid %d)", index, pid)

    def _on_signal(self, sig: int, _frame: FrameType | None) -> None:
        self.stopping = True
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for index in range(self.workers):
            self._spawn(index)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self.children:
                continue
            index, started = self.children.pop(pid)
            self._reap(pid, index)
            if self.stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            log.error("worker %d (pid %d) exited with %d; starting a new one", index, pid, code)
            self.early_deaths = self.early_deaths + 1 if time.monotonic() - started < _EARLY_DEATH_S else 0
            if self.early_deaths >= _MAX_EARLY_DEATHS:
                log.error("workers keep dying at start; giving up")
                self._on_signal(signal.SIGTERM, None)
                self._wait_all()
                return 1
            time.sleep(min(5.0, 0.2 * 2**self.early_deaths))
            self._spawn(index)
        return 0

    def _wait_all(self) -> None:
        while self.children:
            try:
                pid, _ = os.wait()
            except ChildProcessError:
                return
            if pid in self.children:
                self._reap(pid, self.children.pop(pid)[0])

    def _reap(self, pid: int, index: int) -> None:
        # Its requests are gone with it; its live gauges too.
        self.shared.clear_worker(index)
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid)
