"""Engines taken out of rotation by the operator (rolling upgrades, maintenance).

`installer upgrade` writes the drain file on every gateway host before it restarts a host's
engines: {"engines": ["node-1", ...]}. The router stops choosing those engines for new requests
at once (requests already on them run to their end), and /readyz reports them not ready, so
the installer can wait until none of the gateways has a request outstanding on them.

A file and not an admin endpoint: no new credential to guard, the installer already reaches the
hosts over SSH, and a gateway restarted mid-upgrade reads the same state back on start-up.
"""

import json
from pathlib import Path

from service.watched import WatchedFile


def _names(text: str) -> frozenset[str]:
    names = json.loads(text).get("engines", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("engines must be a list of names")
    return frozenset(names)


class DrainFile(WatchedFile[frozenset[str]]):
    def __init__(self, path: Path | None, interval_s: float = 1.0) -> None:
        super().__init__(path, _names, frozenset(), "drain file",
                         lambda names: f"drained engines: {', '.join(sorted(names)) or 'none'}", interval_s)

    def drained(self) -> frozenset[str]:
        return self.value()
