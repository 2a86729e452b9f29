"""Send the gateways' key file (hashes and limits only) to every serving host over SSH, so a
key created or revoked works or stops working now, not at the next `installer up`.

The file replaces the whole key list on the hosts, so it is sent only once each host's
release.json is read and judged against this control machine's state, as `installer up` does
(revisions.py): a state that never made the revision a host runs (another folder, another
machine, an empty one) would silently revoke every other key there. `--adopt` overrides.

The file is written beside the live one and renamed over it, owner and mode as the gateway
role sets them; each gateway notices the change and reloads it without a restart.
"""

import shlex
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from installer import keys, revisions
from installer.errors import InstallerError
from installer.inventory import Host, Inventory
from installer.ssh import target
from installer.topology import HOST_LAYOUT, serving_hosts

_DEST = f"{HOST_LAYOUT['pli_config_dir']}/keys.json"
# Only where the gateway role already made the config directory: a host not yet installed gets
# the file with its first `installer up`.
_SCRIPT = (
    f"set -e; test -d {HOST_LAYOUT['pli_config_dir']} || exit 3; "
    f"tmp=$(mktemp {_DEST}.XXXXXX); cat > \"$tmp\"; "
    f"chown root:{HOST_LAYOUT['pli_user']} \"$tmp\"; chmod 0640 \"$tmp\"; mv -f \"$tmp\" {_DEST}"
)
# What the host runs, on stdout ("" when it runs nothing yet), as preflight reads it for `up`.
_READ_RELEASE = f"if test -e {revisions.HOST_RELEASE_FILE}; then cat {revisions.HOST_RELEASE_FILE}; fi"


_T = TypeVar("_T")


class KeyPushError(InstallerError):
    """The key file could not be sent to one or more hosts."""


@dataclass
class Checked:
    """Serving hosts whose release.json this state knows (or `--adopt` took over)."""

    inv: Inventory
    hosts: list[Host]
    unreadable: list[str] = field(default_factory=list)  # "host: why", never sent the file
    adopted: list[str] = field(default_factory=list)  # "host: why", sent it under --adopt


def _on_host(inv: Inventory, host: Host, script: str, data: bytes = b"") -> tuple[int, str, str]:
    t = target(inv, host)
    argv = t.ssh_argv("sudo -n sh -c " + shlex.quote(script) if t.user != "root" else script)
    try:
        proc = subprocess.run(argv, input=data, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "no answer within 60 s"
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace").strip()[-300:]


def _parallel(hosts: list[Host], fn: Callable[[Host], _T]) -> list[_T]:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        return list(pool.map(fn, hosts))


def check(inv: Inventory, *, adopt: bool = False, command: str = "keys create") -> Checked:
    """Read every serving host's release.json and refuse, before any host or the key store is
    changed, when one runs a revision this state does not know (unless `adopt`); `command` is
    the one the refusal's fixes name."""
    hosts = serving_hosts(inv)
    answers = _parallel(hosts, lambda h: (h, *_on_host(inv, h, _READ_RELEASE)))
    read = {h.name: out for h, rc, out, _ in answers if rc == 0}
    unreadable = [f"{h.name}: could not read its release record: {err or f'exit {rc}'}"
                  for h, rc, _, err in answers if rc != 0]
    unknown = revisions.unknown_on_hosts(inv.deployment, read)
    if unknown and not adopt:
        raise revisions.unknown_state_error(inv.deployment, unknown, command=command)
    return Checked(
        inv, [h for h in hosts if h.name in read], unreadable, [f"{u.host}: {u.reason}" for u in unknown]
    )


def send(checked: Checked, store: keys.KeyStore | None = None) -> list[str]:
    """Send the file to the checked hosts; returns the names of those that got it."""
    content = keys.render_hosts_file(store or keys.load()).encode()
    results = _parallel(checked.hosts, lambda h: (h.name, *_on_host(checked.inv, h, _SCRIPT, content)))
    failed = checked.unreadable + [
        f"{name}: {'not installed yet' if rc == 3 else err or f'exit {rc}'}" for name, rc, _, err in results if rc != 0
    ]
    if failed:
        raise KeyPushError("the key file did not reach every gateway; run `installer up` later", failed)
    return [name for name, _, _, _ in results]


def push(inv: Inventory, store: keys.KeyStore | None = None, *, adopt: bool = False) -> list[str]:
    """Check the hosts, then send them the file."""
    return send(check(inv, adopt=adopt), store)
