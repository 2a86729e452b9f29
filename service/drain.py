"""Engines taken out of rotation by the operator (rolling upgrades, maintenance).

`installer upgrade` writes the drain file on every gateway host before it restarts a host's
engines: {"engines": ["node-1", ...]}. The router stops choosing those engines for new requests
at once (requests already on them run to their end), and /readyz reports them not ready, so
the installer can wait until none of the gateways has a request outstanding on them.

A file and not an admin endpoint: no new credential to guard, the installer already reaches the
hosts over SSH, and a gateway restarted mid-upgrade reads the same state back on start-up.
"""

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)


class DrainFile:
    def __init__(self, path: Path | None, interval_s: float = 1.0) -> None:
        self.path = path
        self.interval_s = interval_s
        self._names: frozenset[str] = frozenset()
        self._stamp: tuple[int, int, int] | None = None
        self._checked = float("-inf")
        self.refresh(force=True)

    def drained(self) -> frozenset[str]:
        self.refresh()
        return self._names

    def refresh(self, force: bool = False) -> None:
        """Re-read when the file's mtime/size/inode change; at most one stat per interval."""
        now = time.monotonic()
        if self.path is None or (not force and now - self._checked < self.interval_s):
            return
        self._checked = now
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._set(frozenset(), None)
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        try:
            names = json.loads(self.path.read_text()).get("engines", [])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError("engines must be a list of names")
        except (OSError, ValueError, AttributeError) as exc:
            # Keep the last good list: a half-written or broken file must not re-admit engines.
            log.error("drain file %s unreadable, keeping %s: %s", self.path, sorted(self._names), exc)
            return
        self._set(frozenset(names), stamp)

    def _set(self, names: frozenset[str], stamp: tuple[int, int, int] | None) -> None:
        if names != self._names:
            log.info("drained engines: %s", ", ".join(sorted(names)) or "none")
        self._names, self._stamp = names, stamp
