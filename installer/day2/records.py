"""What each host says it runs (release.json), read over SSH, next to the control machine's record."""

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from installer import revisions
from installer.inventory import Host, Inventory
from installer.ssh import target


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


def read(inv: Inventory) -> list[HostRecord]:
    recorded = revisions.host_revisions(inv.deployment)

    def one(host: Host) -> HostRecord:
        argv = target(inv, host).ssh_argv(f"cat {revisions.HOST_RELEASE_FILE} 2>/dev/null || echo '{{}}'")
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            data = json.loads(proc.stdout or "{}") if proc.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError) as exc:
            return HostRecord(host.name, recorded.get(host.name), None, "", str(exc))
        if data is None:
            return HostRecord(host.name, recorded.get(host.name), None, "", proc.stderr.strip()[:80])
        return HostRecord(host.name, recorded.get(host.name), data.get("revision"), data.get("release_id", ""))

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(inv.hosts)))) as pool:
        return list(pool.map(one, inv.hosts))
