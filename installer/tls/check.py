"""Checks of the certificates a user brings (`tls.mode: provided`), before any host is touched.

Yields (inventory location, problem) pairs; inventory_checks turns them into file:line errors.
"""

from collections.abc import Iterator
from pathlib import Path

from installer.inventory.models import Inventory
from installer.tls import ca
from installer.tls.store import host_names

Loc = tuple[str | int, ...]


def _read(path: Path, what: str) -> tuple[bytes | None, str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"cannot read {what} {path} ({exc.strerror}); fix the path"
    if b"-----BEGIN " not in data:
        return None, f"{path} is not a PEM file; give the {what} in PEM format"
    return data, ""


def provided(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    tls = inv.tls
    if tls.mode != "provided" or tls.ca is None:
        return
    ca_pem, problem = _read(tls.ca, "CA certificate")
    if problem:
        yield ("tls", "ca"), problem
    names = {h.name for h in inv.hosts}
    for name in tls.certificates:
        if name not in names:
            yield ("tls", "certificates", name), f"{name!r} is not a host of this inventory"
    for host in inv.hosts:
        given = tls.certificates.get(host.name)
        if given is None:
            yield ("tls", "certificates"), f"no certificate for host {host.name!r}; add {host.name}: {{cert, key}}"
            continue
        loc: Loc = ("tls", "certificates", host.name)
        cert_pem, problem = _read(given.cert, "certificate")
        if problem:
            yield (*loc, "cert"), problem
        key_pem, problem = _read(given.key, "private key")
        if problem:
            yield (*loc, "key"), problem
        elif given.key.stat().st_mode & 0o077:
            yield (*loc, "key"), (
                f"{given.key} is readable by other users (mode {given.key.stat().st_mode & 0o777:o}); "
                f"chmod 600 {given.key}"
            )
        if cert_pem is None:
            continue
        try:
            left = ca.days_left(cert_pem)
            dns, ips = ca.sans_of(cert_pem)
        except ValueError as exc:
            yield (*loc, "cert"), f"{given.cert} is not a valid certificate ({exc})"
            continue
        if left <= 0:
            yield (*loc, "cert"), f"{given.cert} expired {-left:.0f} day(s) ago; renew it"
        # Each gateway shows its host's certificate to the engines and Redis of other hosts.
        missing_usage = {"serverAuth", "clientAuth"} - ca.usages_of(cert_pem)
        if missing_usage:
            yield (*loc, "cert"), (
                f"{given.cert} lacks extended key usage {', '.join(sorted(missing_usage))}; "
                "issue it for both TLS server and client authentication"
            )
        want_dns, want_ips = host_names(inv, host)
        missing = sorted(set(want_ips) - ips) + sorted(set(want_dns[1:]) - dns)
        if missing:
            yield (*loc, "cert"), (
                f"{given.cert} does not name {', '.join(missing)} (it has DNS {sorted(dns)}, "
                f"IP {sorted(ips)}); clients reach the host by that name"
            )
        if key_pem is not None:
            try:
                if not ca.key_matches(cert_pem, key_pem):
                    yield (*loc, "key"), f"{given.key} is not the key of {given.cert}"
            except (ValueError, TypeError) as exc:
                yield (*loc, "key"), f"cannot load {given.key} ({exc}); give an unencrypted PEM key"
        if ca_pem is not None and not ca.signed_by(cert_pem, ca_pem):
            yield (*loc, "cert"), f"{given.cert} is not signed by tls.ca {tls.ca}"
