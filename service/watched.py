"""A small file the operator's tools write and the gateway re-reads when it changes (the drain
list, the release stages): at most one stat per interval, re-read only when its mtime, size or
inode change, and a broken or unreadable file keeps the last good value (a half-written file
must never re-admit drained engines or move callers between stages).
"""

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class WatchedFile(Generic[T]):
    """`parse(text)` of the file at `path` (None: never a file), `empty` while it is absent;
    `describe(value)` is logged when the value changes."""

    def __init__(self, path: Path | None, parse: Callable[[str], T], empty: T, what: str,
                 describe: Callable[[T], str], interval_s: float = 1.0) -> None:
        self.path = path
        self.interval_s = interval_s
        self._parse, self._empty, self._what, self._describe = parse, empty, what, describe
        self._value = empty
        self._stamp: tuple[int, int, int] | None = None
        self._checked = float("-inf")
        self.refresh(force=True)

    def value(self) -> T:
        self.refresh()
        return self._value

    def refresh(self, force: bool = False) -> None:
        """Re-read when the file's mtime/size/inode change; at most one stat per interval."""
        now = time.monotonic()
        if self.path is None or (not force and now - self._checked < self.interval_s):
            return
        self._checked = now
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._set(self._empty, None)
            return
        except OSError as exc:  # permissions, I/O: as a broken file
            log.error("%s %s unusable, keeping the last good one: %s", self._what, self.path, exc)
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        try:
            value = self._parse(self.path.read_text())
        except (OSError, ValueError, AttributeError) as exc:
            log.error("%s %s unusable, keeping the last good one: %s", self._what, self.path, exc)
            return
        self._set(value, stamp)

    def _set(self, value: T, stamp: tuple[int, int, int] | None) -> None:
        if value != self._value:
            log.info("%s", self._describe(value))
        self._value, self._stamp = value, stamp
