"""Send the gateways' key file (hashes and limits only) to every serving host over SSH, so a
key created or revoked works or stops working now, not at the next `installer up`.

The file is written beside the live one and renamed over it, owner and mode as the gateway
role sets them; each gateway notices the change and reloads it without a restart.
"""

import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

from installer import keys
from installer.ansible.render import HOST_LAYOUT
from installer.errors import InstallerError
from installer.inventory import Inventory
from installer.ssh import target
from installer.topology import serving_hosts

_DEST = f"{HOST_LAYOUT['pli_config_dir']}/keys.json"
# Only where the gateway role already made the config directory: a host not yet installed gets
# the file with its first `installer up`.
_SCRIPT = (
    f"set -e; test -d {HOST_LAYOUT['pli_config_dir']} || exit 3; "
    f"tmp=$(mktemp {_DEST}.XXXXXX); cat > \"$tmp\"; "
    f"chown root:{HOST_LAYOUT['pli_user']} \"$tmp\"; chmod 0640 \"$tmp\"; mv -f \"$tmp\" {_DEST}"
)


class KeyPushError(InstallerError):
    """The key file could not be sent to one or more hosts."""


def push(inv: Inventory, store: keys.KeyStore | None = None) -> list[str]:
    """Send the file to every serving host; returns the names of those that got it."""
    content = keys.render_hosts_file(store or keys.load()).encode()

    def one(host) -> tuple[str, int, str]:  # type: ignore[no-untyped-def]
        t = target(inv, host)
        argv = t.ssh_argv("sudo -n sh -c " + shlex.quote(_SCRIPT) if t.user != "root" else _SCRIPT)
        proc = subprocess.run(argv, input=content, capture_output=True, timeout=60, check=False)
        return host.name, proc.returncode, proc.stderr.decode(errors="replace").strip()[-300:]

    hosts = serving_hosts(inv)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        results = list(pool.map(one, hosts))
    failed = [f"{name}: {'not installed yet' if rc == 3 else err or f'exit {rc}'}"
              for name, rc, err in results if rc != 0]
    if failed:
        raise KeyPushError("the key file did not reach every gateway; run `installer up` later", failed)
    return [name for name, _, _ in results]
