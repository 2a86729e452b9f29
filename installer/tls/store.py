"""The deployment's certificates on the control machine, and what `installer up` sends hosts.

Layout under the state directory (`tls/<deployment>/`): `ca.pem` (0644), `ca.key` (0600, never
leaves this machine), `hosts/<host>/server.pem` (0644) and `server.key` (0600). With
`tls.mode: provided` nothing is written: the user's files are used where they are.
"""

from dataclasses import dataclass
from pathlib import Path

from installer.base.errors import InstallerError
from installer.base.files import atomic_write
from installer.base.paths import state_dir
from installer.inventory.hosts import Host
from installer.inventory.models import Inventory
from installer.tls import ca


class TLSError(InstallerError):
    """The deployment's certificates cannot be read, issued or used."""


@dataclass(frozen=True)
class HostFiles:
    """Files on the control machine that become /etc/private-llm/tls/* on one host."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Issuance:
    host: str
    action: str  # "issued", "renewed", "kept" or "provided"
    days_left: float
    reason: str = ""


def deployment_dir(deployment: str) -> Path:
    return state_dir() / "tls" / deployment


_write = atomic_write


def host_names(inv: Inventory, host: Host) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) a host's certificate must carry."""
    dns = [host.name]
    addresses: list[str] = []
    try:
        ca.san_entries([], [host.address])
        addresses.append(host.address)
    except ValueError:
        dns.append(host.address)  # a DNS name given as the address
    if inv.tls.service_name:
        dns.append(inv.tls.service_name)
    # Clients reach a gateway host through the frontend's virtual IP (and its name) too.
    if inv.frontend is not None and "serving" in inv.host_groups(host):
        addresses.append(inv.frontend.address())
        if inv.frontend.name and inv.frontend.name not in dns:
            dns.append(inv.frontend.name)
    return dns, addresses


def ensure_ca(deployment: str) -> ca.Issued:
    d = deployment_dir(deployment)
    cert, key = d / "ca.pem", d / "ca.key"
    if cert.is_file() and key.is_file():
        return ca.Issued(cert.read_bytes(), key.read_bytes())
    issued = ca.create_ca(deployment)
    _write(key, issued.key_pem, 0o600)
    _write(cert, issued.cert_pem, 0o644)
    return issued


def host_files(inv: Inventory, host_name: str) -> HostFiles:
    if inv.tls.mode == "provided":
        given = inv.tls.certificates[host_name]
        assert inv.tls.ca is not None  # the model requires it in this mode
        return HostFiles(inv.tls.ca, given.cert, given.key)
    d = deployment_dir(inv.deployment)
    return HostFiles(d / "ca.pem", d / "hosts" / host_name / "server.pem", d / "hosts" / host_name / "server.key")


def _why_renew(inv: Inventory, host: Host, files: HostFiles, ca_pem: bytes) -> str:
    if not files.cert.is_file() or not files.key.is_file():
        return "no certificate yet"
    pem = files.cert.read_bytes()
    left = ca.days_left(pem)
    if left <= inv.tls.renew_before_days:
        return f"expires in {left:.1f} days (renewal threshold {inv.tls.renew_before_days})"
    if not ca.signed_by(pem, ca_pem):
        return "signed by another CA"
    if not ca.key_matches(pem, files.key.read_bytes()):
        return "key does not match"
    dns, addresses = host_names(inv, host)
    if ca.sans_of(pem) != (set(dns), set(addresses)):
        return "host names or addresses changed"
    return ""


def prepare(inv: Inventory) -> list[Issuance]:
    """Issue or renew what is needed (mode issue), or check what the user gave (provided)."""
    if inv.tls.mode == "off":
        return []
    done: list[Issuance] = []
    if inv.tls.mode == "provided":
        for host in inv.hosts:
            files = host_files(inv, host.name)
            done.append(Issuance(host.name, "provided", ca.days_left(files.cert.read_bytes())))
        return done
    authority = ensure_ca(inv.deployment)
    for host in inv.hosts:
        files = host_files(inv, host.name)
        reason = _why_renew(inv, host, files, authority.cert_pem)
        if reason:
            dns, addresses = host_names(inv, host)
            issued = ca.issue_server(authority, host.name, dns, addresses, inv.tls.cert_days)
            _write(files.key, issued.key_pem, 0o600)
            _write(files.cert, issued.cert_pem, 0o644)
            action = "issued" if reason == "no certificate yet" else "renewed"
        else:
            action = "kept"
        done.append(Issuance(host.name, action, ca.days_left(files.cert.read_bytes()), reason))
    return done


def report(inv: Inventory, done: list[Issuance]) -> list[str]:
    """What `installer up` tells its user about the certificates."""
    if inv.tls.mode == "off":
        return ["[bold red]TLS is off (tls.mode: off): API keys and prompts cross the network in clear text[/]"]
    lines = []
    for i in done:
        why = f" ({i.reason})" if i.action == "renewed" else ""
        lines.append(f"{i.host}: TLS certificate {i.action}{why}, expires in {i.days_left:.0f} days")
    return lines


def days_to_expiry(inv: Inventory, host_name: str) -> float | None:
    """Days until the certificate `installer up` last sent to this host expires; None if TLS
    is off or none was issued yet. (`installer status` shows it.)"""
    if inv.tls.mode == "off":
        return None
    try:
        return ca.days_left(host_files(inv, host_name).cert.read_bytes())
    except (OSError, KeyError):
        return None


def ca_certificate(inv: Inventory) -> bytes:
    """The CA certificate clients trust (`installer ca export`)."""
    if inv.tls.mode == "off":
        raise TLSError(f"deployment {inv.deployment} has tls.mode off: there is no CA to export")
    if inv.tls.mode == "provided":
        assert inv.tls.ca is not None
        try:
            return inv.tls.ca.read_bytes()
        except OSError as exc:  # `ca export` runs no inventory checks: say which setting
            raise TLSError(
                f"{inv.where('tls', 'ca')}: cannot read {inv.tls.ca} ({exc.strerror}); fix the path "
                "(`installer validate` checks every certificate)"
            ) from exc
    path = deployment_dir(inv.deployment) / "ca.pem"
    if not path.is_file():
        raise TLSError(
            f"no CA for deployment {inv.deployment} yet ({path}); `installer up` creates it"
        )
    return path.read_bytes()
