"""The deployment CA and the host certificates it signs (pure functions over `cryptography`).

Keys are ECDSA P-256: every TLS stack our users' clients run (Java 8, .NET, old OpenSSL, curl,
browsers, load balancers) accepts it, while Ed25519 certificates are still refused by many of
them (browsers, Java < 15, most HSM-backed proxies). P-256 signatures are also cheap enough
that handshakes do not show in the gateway's latency.
"""

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
# Backdated a little so a host whose clock runs a few minutes behind accepts a fresh certificate.
_CLOCK_SKEW = dt.timedelta(minutes=5)


_USAGE_NAMES = {ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth", ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth"}


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, now: dt.datetime, days: int, *, ca: bool
) -> x509.CertificateBuilder:
    """What the CA's and a host's certificates share: names, key, validity, and the basic
    constraints and key usage that tell a CA (signs certificates, path length 0) from a host."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    )


def create_ca(deployment: str, days: int = CA_DAYS, now: dt.datetime | None = None) -> Issued:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "private-llm"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"private-llm {deployment} CA"),
    ])
    cert = (
        _builder(name, name, key, now, days, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def san_entries(dns_names: list[str], addresses: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for name in dict.fromkeys(dns_names):
        names.append(x509.DNSName(name))
    for addr in dict.fromkeys(addresses):
        names.append(x509.IPAddress(ipaddress.ip_address(addr)))
    return names


def issue_server(
    ca: Issued, common_name: str, dns_names: list[str], addresses: list[str], days: int,
    now: dt.datetime | None = None,
) -> Issued:
    """A host certificate: serverAuth for its gateway and engine, clientAuth because its
    gateway presents it to the engines of other hosts (they require a deployment client)."""
    now = now or _now()
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(subject, ca_cert.subject, key, now, days, ca=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(san_entries(dns_names, addresses)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def days_left(cert_pem: bytes, now: dt.datetime | None = None) -> float:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return (cert.not_valid_after_utc - (now or _now())).total_seconds() / 86400


def sans_of(cert_pem: bytes) -> tuple[set[str], set[str]]:
    """(DNS names, IP addresses) of a certificate, as strings."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(ext.get_values_for_type(x509.DNSName)), {
        str(a) for a in ext.get_values_for_type(x509.IPAddress)
    }


def usages_of(cert_pem: bytes) -> set[str]:
    """Extended key usages ("serverAuth", "clientAuth", ...); none listed means any."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return {"serverAuth", "clientAuth"}
    return {_USAGE_NAMES.get(oid, oid.dotted_string) for oid in eku}


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca_cert = x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        cert.public_key().public_bytes(serialization.Encoding.DER, spki)
        == key.public_key().public_bytes(serialization.Encoding.DER, spki)
    )
