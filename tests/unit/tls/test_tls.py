"""The deployment CA and host certificates: what is in them, when they are renewed, file modes,
and the checks of certificates a user brings."""

import datetime as dt
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from installer import tls
from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.preparation.inventory_checks import check_inventory
from installer.tls import ca, store
from tests.support.site_file import site_file

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def _inventory(tmp_path: Path, tls_yaml: str = "", address: str = "10.0.0.1") -> Path:
    hosts = f"hosts:\n  - name: h1\n    address: {address}\n  - name: h2\n    address: 10.0.0.2\n"
    return site_file(tmp_path, tls_yaml, hosts)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_ca_is_a_p256_ca_for_end_entities_only() -> None:
    issued = ca.create_ca("demo", now=NOW)
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign and ku.crl_sign
    assert cert.not_valid_after_utc - NOW == dt.timedelta(days=ca.CA_DAYS)


def test_server_certificate_names_usages_and_validity() -> None:
    authority = ca.create_ca("demo", now=NOW)
    issued = ca.issue_server(authority, "h1", ["h1", "llm.example.internal"], ["10.0.0.1"], 90, now=NOW)
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    assert ca.sans_of(issued.cert_pem) == ({"h1", "llm.example.internal"}, {"10.0.0.1"})
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and not ku.key_cert_sign
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert cert.not_valid_after_utc - NOW == dt.timedelta(days=90)
    assert cert.not_valid_before_utc < NOW  # a host whose clock is a little behind accepts it
    assert ca.signed_by(issued.cert_pem, authority.cert_pem)
    assert not ca.signed_by(issued.cert_pem, ca.create_ca("other").cert_pem)
    assert ca.key_matches(issued.cert_pem, issued.key_pem)
    assert ca.days_left(issued.cert_pem, now=NOW + dt.timedelta(days=80)) == pytest.approx(10)


def test_openssl_verifies_the_chain_and_the_address(tmp_path: Path) -> None:
    authority = ca.create_ca("demo")
    issued = ca.issue_server(authority, "h1", ["h1"], ["10.0.0.1"], 30)
    (tmp_path / "ca.pem").write_bytes(authority.cert_pem)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    # The standard library's verifier accepts the CA (a check that the extensions are sane).
    assert ctx.get_ca_certs()[0]["subject"][-1][0][1] == "private-llm demo CA"
    assert x509.load_pem_x509_certificate(issued.cert_pem).issuer.rfc4514_string().endswith("private-llm")


def test_prepare_issues_keeps_and_renews(state: Path, tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "tls: {service_name: llm.example.internal, renew_before_days: 30}\n"))
    first = tls.prepare(inv)
    assert [(i.host, i.action) for i in first] == [("h1", "issued"), ("h2", "issued")]
    d = state / "tls" / "demo"
    assert stat.S_IMODE((d / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((d / "hosts" / "h1" / "server.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((d / "ca.pem").stat().st_mode) == 0o644
    assert ca.sans_of((d / "hosts" / "h1" / "server.pem").read_bytes()) == (
        {"h1", "llm.example.internal"}, {"10.0.0.1"},
    )
    ca_before = (d / "ca.pem").read_bytes()
    assert [i.action for i in tls.prepare(inv)] == ["kept", "kept"]
    assert tls.days_to_expiry(inv, "h1") == pytest.approx(365, abs=0.1)

    # h1's certificate now expires in 20 days: inside the 30-day threshold, so it is renewed.
    authority = ca.Issued(ca_before, (d / "ca.key").read_bytes())
    old = ca.issue_server(authority, "h1", ["h1", "llm.example.internal"], ["10.0.0.1"], 365,
                          now=dt.datetime.now(dt.UTC) - dt.timedelta(days=345))
    (d / "hosts" / "h1" / "server.pem").write_bytes(old.cert_pem)
    (d / "hosts" / "h1" / "server.key").write_bytes(old.key_pem)
    assert tls.days_to_expiry(inv, "h1") == pytest.approx(20, abs=0.1)
    again = {i.host: i for i in tls.prepare(inv)}
    assert again["h1"].action == "renewed" and "expires in 20.0 days" in again["h1"].reason
    assert again["h2"].action == "kept"
    assert tls.days_to_expiry(inv, "h1") == pytest.approx(365, abs=0.1)
    assert (d / "ca.pem").read_bytes() == ca_before  # the CA is kept: clients keep trusting it


def test_prepare_reissues_when_the_address_changes(state: Path, tmp_path: Path) -> None:
    tls.prepare(load_inventory(_inventory(tmp_path)))
    moved = load_inventory(_inventory(tmp_path, address="10.0.0.9"))
    result = {i.host: i for i in tls.prepare(moved)}
    assert result["h1"].action == "renewed" and "changed" in result["h1"].reason
    pem = (state / "tls" / "demo" / "hosts" / "h1" / "server.pem").read_bytes()
    assert ca.sans_of(pem) == ({"h1"}, {"10.0.0.9"})


def test_tls_off_issues_nothing(state: Path, tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "tls: {mode: off}\n"))  # bare YAML `off`
    assert inv.tls.mode == "off"
    assert tls.prepare(inv) == [] and tls.days_to_expiry(inv, "h1") is None
    assert not (state / "tls").exists()
    with pytest.raises(store.TLSError, match="no CA to export"):
        store.ca_certificate(inv)


def _provided(tmp_path: Path, h1_addresses: list[str], key_mode: int = 0o600,
              other_key: bool = False, days: int = 30) -> Path:
    authority = ca.create_ca("theirs")
    (tmp_path / "ca.pem").write_bytes(authority.cert_pem)
    for name, addrs in (("h1", h1_addresses), ("h2", ["10.0.0.2"])):
        # days < 0: issued 30 days ago for 30 + days days, so expired |days| days ago
        now = dt.datetime.now(dt.UTC) - (dt.timedelta(days=30) if days < 0 else dt.timedelta())
        issued = ca.issue_server(authority, name, [name], addrs, 30 + days if days < 0 else days, now=now)
        (tmp_path / f"{name}.pem").write_bytes(issued.cert_pem)
        key = ca.issue_server(authority, name, [name], addrs, 30).key_pem if other_key else issued.key_pem
        (tmp_path / f"{name}.key").write_bytes(key)
        (tmp_path / f"{name}.key").chmod(key_mode)
    return _inventory(tmp_path, (
        "tls:\n  mode: provided\n  ca: ca.pem\n  certificates:\n"
        "    h1: {cert: h1.pem, key: h1.key}\n    h2: {cert: h2.pem, key: h2.key}\n"
    ))


def test_provided_certificates_are_used_as_given(state: Path, tmp_path: Path) -> None:
    inv = load_inventory(_provided(tmp_path, ["10.0.0.1"]))
    assert [i.action for i in tls.prepare(inv)] == ["provided", "provided"]
    assert tls.host_files(inv, "h1").cert == tmp_path / "h1.pem"
    assert store.ca_certificate(inv) == (tmp_path / "ca.pem").read_bytes()
    assert not (state / "tls").exists()  # nothing issued


def test_ca_export_names_an_unreadable_provided_ca(tmp_path: Path) -> None:
    """The loader reads no certificate and `ca export` runs no inventory checks: the error still
    says which setting, at which line, instead of a traceback."""
    path = _provided(tmp_path, ["10.0.0.1"])
    (tmp_path / "ca.pem").unlink()
    with pytest.raises(store.TLSError) as err:
        store.ca_certificate(load_inventory(path))
    assert f"{path}:" in str(err.value) and "tls.ca: cannot read" in str(err.value), err.value


@pytest.mark.parametrize(
    ("kwargs", "line", "message"),
    [
        ({"h1_addresses": ["10.9.9.9"]}, 12, "h1.pem does not name 10.0.0.1"),
        ({"h1_addresses": ["10.0.0.1"], "key_mode": 0o644}, 12, "readable by other users (mode 644); chmod 600"),
        ({"h1_addresses": ["10.0.0.1"], "other_key": True}, 12, "h1.key is not the key of"),
        ({"h1_addresses": ["10.0.0.1"], "days": -2}, 12, "expired 2 day(s) ago; renew it"),
    ],
    ids=["wrong-address", "key-readable", "key-mismatch", "expired"],
)
def test_provided_certificate_problems_name_the_line(
    tmp_path: Path, kwargs: dict, line: int, message: str
) -> None:
    path = _provided(tmp_path, **kwargs)
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(path))
    text = "\n".join(err.value.details)
    assert f"{path}:{line}: tls.certificates.h1" in text, text
    assert message in text, text


def test_provided_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    path = _provided(tmp_path, ["10.0.0.1"])
    (tmp_path / "ca.pem").write_bytes(ca.create_ca("unrelated").cert_pem)
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(path))
    assert "is not signed by tls.ca" in "\n".join(err.value.details)


def test_provided_certificate_must_allow_client_authentication(tmp_path: Path) -> None:
    """Gateways show their host's certificate to other hosts' engines: serverAuth alone fails."""
    from cryptography.hazmat.primitives import hashes, serialization

    path = _provided(tmp_path, ["10.0.0.1"])
    authority = ca.create_ca("theirs")
    (tmp_path / "ca.pem").write_bytes(authority.cert_pem)
    ca_key = serialization.load_pem_private_key(authority.key_pem, password=None)
    ca_cert = x509.load_pem_x509_certificate(authority.cert_pem)
    for name, addr in (("h1", "10.0.0.1"), ("h2", "10.0.0.2")):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(dt.datetime.now(dt.UTC)).not_valid_after(dt.datetime.now(dt.UTC) + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(ca.san_entries([name], [addr])), critical=False)
        )
        if name == "h1":
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        (tmp_path / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (tmp_path / f"{name}.key").write_bytes(ca._key_pem(key))
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(path))
    text = "\n".join(err.value.details)
    assert f"{path}:12: tls.certificates.h1.cert" in text and "lacks extended key usage clientAuth" in text, text
    assert "h2" not in text  # no EKU at all means any usage
