"""Send the gateways' key file (hashes and limits only) to every serving host over SSH, so a
key created or revoked works or stops working now, not at the next `installer up`.

The file replaces the whole key list on the hosts, so it is sent only once each host's
release.json is read and judged against this control machine's state, as `installer up` does
(revisions.py): a state that never made the revision a host runs (another folder, another
machine, an empty one) would silently revoke every other key there. `--adopt` overrides.

The files (quotas.json, key_roles.json, then keys.json) are written beside the live ones and renamed over
them, owner and mode as the gateway role sets them; each gateway notices the change and
reloads them without a restart. Then each gateway's /readyz must show the sha256 of the files
just sent: a gateway that kept its old keys (a file it cannot read, a gateway too old to say
what it loaded) is named and the command fails, since a revoked key may still work there.
"""

import hashlib
import shlex
import ssl
import time
from dataclasses import dataclass, field
from typing import TypeVar

from installer.base.errors import InstallerError
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT, serving_hosts
from installer.secrets import keys
from installer.state import revisions

_DEST = f"{HOST_LAYOUT['pli_config_dir']}/keys.json"
_QUOTAS_DEST = f"{HOST_LAYOUT['pli_config_dir']}/{keys.QUOTAS_FILE_NAME}"
_ROLES_DEST = f"{HOST_LAYOUT['pli_config_dir']}/{keys.ROLES_FILE_NAME}"


def _install(dest: str, source: str) -> str:
    """Shell that writes `source` (shell words) to dest atomically, as the gateway role does."""
    return (
        f"tmp=$(mktemp {dest}.XXXXXX); {source} > \"$tmp\"; "
        f"chown root:{HOST_LAYOUT['pli_user']} \"$tmp\"; chmod 0640 \"$tmp\"; mv -f \"$tmp\" {dest}; "
    )


def _script(quotas: str, roles: str) -> str:
    """Only where the gateway role already made the config directory: a host not yet installed
    gets the files with its first `installer up`. The quotas and roles (names and numbers, no
    secret) are in the command, the keys on stdin; keys last, so reloaded keys find theirs."""
    return (
        f"set -e; test -d {HOST_LAYOUT['pli_config_dir']} || exit 3; "
        + _install(_QUOTAS_DEST, "printf %s " + shlex.quote(quotas))
        + _install(_ROLES_DEST, "printf %s " + shlex.quote(roles))
        + _install(_DEST, "cat")
    )


CONFIRM_TIMEOUT_S = 15.0  # a gateway checks its files every second
_CONFIRM_ANSWERS = 3  # in a row: each worker process of a gateway reloads on its own
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


def check(inv: Inventory, *, adopt: bool = False, command: str = "keys create") -> Checked:
    """Read every serving host's release.json and refuse, before any host or the key store is
    changed, when one runs a revision this state does not know (unless `adopt`); `command` is
    the one the refusal's fixes name."""
    hosts = serving_hosts(inv)
    answers = remote.run([target(inv, h) for h in hosts], _READ_RELEASE)
    read = {r.host: r.text for r in answers if r.ok}
    unreadable = [f"{r.host}: could not read its release record: {r.why}" for r in answers if not r.ok]
    unknown = revisions.unknown_on_hosts(inv.deployment, read)
    if unknown and not adopt:
        raise revisions.unknown_state_error(inv.deployment, unknown, command=command)
    return Checked(
        inv, [h for h in hosts if h.name in read], unreadable, [f"{u.host}: {u.reason}" for u in unknown]
    )


def send(checked: Checked, store: keys.KeyStore | None = None) -> list[str]:
    """Send the files to the checked hosts and confirm each gateway loaded them; returns the
    names of the hosts whose gateways did."""
    store = store or keys.load()
    content, quotas = keys.render_hosts_file(store), keys.render_quotas_file(store)
    roles = keys.render_roles_file(store)
    script = _script(quotas, roles)
    results = remote.run([target(checked.inv, h) for h in checked.hosts], script, stdin=content.encode())
    failed = checked.unreadable + [
        f"{r.host}: {'not installed yet' if r.rc == 3 else r.why}" for r in results if not r.ok
    ]
    sent = [h for h in checked.hosts if h.name in {r.host for r in results if r.ok}]
    want = {"keys_sha256": _sha(content), "quotas_sha256": _sha(quotas), "roles_sha256": _sha(roles)}
    failed += confirm(checked.inv, sent, want)
    if failed:
        raise KeyPushError(
            "these gateways did not take the new key file: a revoked key may still work there",
            [*failed, "run `installer up -i <inventory>` (or `installer upgrade` for a gateway of an "
             "earlier release), then this command again"],
        )
    return [h.name for h in sent]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _loaded(name: str, base: str, want: dict[str, str], ctx: ssl.SSLContext | None, deployment: str,
            deadline: float) -> str | None:
    """None once the gateway at `base` shows the digests of `want`; else why not, at the
    deadline. A gateway of a release before key roles has no roles_sha256 to show."""
    from installer.hosts import prove

    why, matched = "no answer", 0
    while True:
        try:
            body = prove.readyz(base, ctx, deployment)
        except (OSError, ValueError) as exc:
            body, why = {}, f"its gateway did not answer /readyz: {type(exc).__name__}: {exc}"
        if body and "keys_sha256" not in body:
            return f"{name}: its gateway does not report the key file it loaded (a release before this one)"
        if all(body.get(k) == v for k, v in want.items() if k in body or k != "roles_sha256"):
            matched += 1
            if matched >= _CONFIRM_ANSWERS:
                return None
            continue
        matched = 0
        if body:
            why = "its gateway still serves the previous key file (its journal says why it did not load the new one)"
        if time.monotonic() >= deadline:
            return f"{name}: {why}"
        time.sleep(0.5)


def confirm_at(
    bases: dict[str, str], want: dict[str, str], ctx: ssl.SSLContext | None, deployment: str = "",
    timeout_s: float = CONFIRM_TIMEOUT_S,
) -> list[str]:
    """'name: why' for each gateway (name -> base URL) that has not loaded the files of these
    digests within timeout_s."""
    deadline = time.monotonic() + timeout_s
    answers = remote.each(list(bases.items()), lambda nb: _loaded(nb[0], nb[1], want, ctx, deployment, deadline))
    return [a for a in answers if a is not None]


def confirm(inv: Inventory, hosts: list[Host], want: dict[str, str]) -> list[str]:
    """confirm_at for the hosts' gateways, reached as the deploy's proof reaches them."""
    if not hosts:
        return []
    from installer.hosts import prove

    ca = prove.ca_file(inv)
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    return confirm_at({h.name: prove.gateway_base(inv, h.address) for h in hosts}, want, ctx, inv.deployment)


def push(inv: Inventory, store: keys.KeyStore | None = None, *, adopt: bool = False) -> list[str]:
    """Check the hosts, then send them the files and confirm each gateway loaded them."""
    return send(check(inv, adopt=adopt), store)
