"""What each host says it runs (release.json), read over SSH, next to the control machine's record."""

import json
from dataclasses import dataclass

from installer.hosts import remote
from installer.hosts.ssh import targets
from installer.inventory import Inventory
from installer.state import revisions


@dataclass(frozen=True)
class HostRecord:
    host: str
    recorded: int | None  # the control machine's state.json
    on_host: int | None  # the host's release.json
    release_id: str
    error: str = ""

    @property
    def drift(self) -> str:
        if self.error:
            return f"unknown ({self.error})"
        if self.recorded == self.on_host:
            return "none"
        return f"state.json says {self.recorded}, host says {self.on_host}"


def read(inv: Inventory, timeout_s: float = 30.0) -> list[HostRecord]:
    """Every host's record; a host that does not answer within `timeout_s` (connecting included)
    is a record with its error, as `installer status --timeout` bounds it."""
    recorded = revisions.host_revisions(inv.deployment)

    def record(r: remote.Result) -> HostRecord:
        if not r.ok:
            return HostRecord(r.host, recorded.get(r.host), None, "", r.why[:80])
        try:
            data = json.loads(r.text or "{}")
        except ValueError as exc:
            return HostRecord(r.host, recorded.get(r.host), None, "", str(exc))
        return HostRecord(r.host, recorded.get(r.host), data.get("revision"), data.get("release_id", ""))

    found = remote.run(targets(inv), f"cat {revisions.HOST_RELEASE_FILE} 2>/dev/null || echo '{{}}'", timeout=timeout_s)
    return [record(r) for r in found]
