"""TLS on the lab deployment: the CA clients trust, HTTPS at the gateways, mutual TLS to the
engines of other hosts, private keys that stay private, and a renewal under streaming load."""

import datetime as dt
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from benchmarks.load import Load
from installer import tls
from installer.hosts.prove import gateway_base
from installer.inventory import Inventory, load_inventory
from installer.tls import ca
from tests.support.e2e import Run, installer, latest_summary, scrape_headers

pytestmark = pytest.mark.e2e


def _inv(lab_hosts) -> Inventory:
    return load_inventory(lab_hosts.inventory_path)


def _ssh(lab_hosts, host, command: str) -> str:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={lab_hosts.known_hosts}",
            "-i", str(lab_hosts.private_key), f"root@{host.address}", command]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _served_cert(address: str, port: int, ca_file: Path, client: tls.store.HostFiles | None = None) -> x509.Certificate:
    ctx = ssl.create_default_context(cafile=ca_file)
    if client:
        ctx.load_cert_chain(client.cert, client.key)
    with socket.create_connection((address, port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=address) as s:
        assert s.version() == "TLSv1.3"
        return x509.load_der_x509_certificate(s.getpeercert(binary_form=True))


@pytest.fixture(scope="module")
def exported_ca(deployed: Run, lab_hosts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    proc = installer("ca", "export", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, proc.stderr
    path = tmp_path_factory.mktemp("client") / "ca.pem"
    path.write_text(proc.stdout)
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    return path


def test_openai_client_with_the_exported_ca_and_without(deployed: Run, lab_hosts, api_key: str,
                                                        exported_ca: Path) -> None:
    from openai import APIConnectionError, OpenAI

    for host in lab_hosts.hosts:
        client = OpenAI(base_url=f"https://{host.address}:8080/v1", api_key=api_key, max_retries=0,
                        http_client=httpx.Client(verify=ssl.create_default_context(cafile=exported_ca)))
        answer = client.chat.completions.create(model="tiny-llama", max_tokens=4,
                                                messages=[{"role": "user", "content": "hi"}])
        assert answer.choices and answer.usage and answer.usage.completion_tokens > 0
    untrusting = OpenAI(base_url=f"https://{lab_hosts.hosts[0].address}:8080/v1", api_key=api_key, max_retries=0)
    with pytest.raises(APIConnectionError) as err:
        untrusting.models.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(err.value.__cause__)
    # The summary tells users the https:// endpoints.
    assert {h["endpoint"] for h in deployed.summary["hosts"]} == {
        f"https://{h.address}:8080/v1" for h in lab_hosts.hosts
    }


def test_wrong_host_name_and_plain_http_are_refused(deployed: Run, lab_hosts, exported_ca: Path) -> None:
    h1, h2 = lab_hosts.hosts[:2]
    ctx = ssl.create_default_context(cafile=exported_ca)
    with socket.create_connection((h1.address, 8080), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        ctx.wrap_socket(raw, server_hostname=h2.address)  # h1's certificate does not name h2
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://{h1.address}:8080/readyz", timeout=5)
    weak = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    weak.load_verify_locations(exported_ca)
    weak.maximum_version = ssl.TLSVersion.TLSv1_2
    weak.set_ciphers("AES256-SHA256:AES128-SHA")  # no forward secrecy
    with socket.create_connection((h1.address, 8080), timeout=10) as raw, pytest.raises(ssl.SSLError):
        weak.wrap_socket(raw, server_hostname=h1.address)


def test_gateways_route_to_the_other_hosts_engine_over_mutual_tls(deployed: Run, lab_hosts, api_key: str,
                                                                   exported_ca: Path, e2e_state: Path) -> None:
    inv = _inv(lab_hosts)
    h1, h2 = lab_hosts.hosts[:2]
    client_files = tls.host_files(inv, h2.name)
    engine_ctx = ssl.create_default_context(cafile=exported_ca)
    engine_ctx.load_cert_chain(client_files.cert, client_files.key)

    def served_by_h2() -> float:
        text = httpx.get(f"https://{h2.address}:8000/metrics", verify=engine_ctx, timeout=10).text
        return sum(float(m) for m in re.findall(r'^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$', text, re.M))

    before = served_by_h2()
    gw = httpx.Client(verify=ssl.create_default_context(cafile=exported_ca), timeout=60,
                      headers={"Authorization": f"Bearer {api_key}"})
    for _ in range(8):  # all through h1's gateway; least outstanding with ties taking turns
        r = gw.post(f"https://{h1.address}:8080/v1/completions",
                    json={"model": "tiny-llama", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200, r.text
    assert served_by_h2() - before >= 3
    # Metrics answer Prometheus's token only, not a client's API key.
    assert gw.get(f"https://{h1.address}:8080/metrics").status_code == 401
    metrics = gw.get(f"https://{h1.address}:8080/metrics", headers=scrape_headers(e2e_state, inv.deployment)).text
    assert f'pli_gateway_engine_healthy{{engine="{h2.name}",model="tiny-llama"}} 1.0' in metrics


def test_private_keys_stay_private(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    inv = _inv(lab_hosts)
    root = e2e_state / "tls" / inv.deployment
    keys = [root / "ca.key", *(tls.host_files(inv, h.name).key for h in lab_hosts.hosts)]
    keys.append(e2e_state / "redis" / f"{inv.deployment}.password")
    keys.append(e2e_state / "metrics" / f"{inv.deployment}.token")
    for path in keys:
        assert path.stat().st_mode & 0o777 == 0o600, path
    secrets = []
    for path in keys:
        body = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("-----")]
        secrets += body or [path.read_text().strip()]
    run_files = [p for p in (e2e_state / "runs").rglob("*") if p.is_file()]
    assert len(run_files) > 10
    for p in run_files:
        text = p.read_text(errors="replace")
        leaked = [s[:12] for s in secrets if s in text]
        assert not leaked, f"{p} holds secret material {leaked}"
    for host in lab_hosts.hosts:
        out = _ssh(lab_hosts, host, "stat -c '%a %U %G %n' /etc/private-llm/tls/server.key "
                   "/etc/private-llm/tls/server.pem /etc/private-llm/tls/ca.pem /etc/private-llm/tls/.staged")
        assert out.split("\n")[:4] == [
            "640 root private-llm /etc/private-llm/tls/server.key",
            "644 root private-llm /etc/private-llm/tls/server.pem",
            "644 root private-llm /etc/private-llm/tls/ca.pem",
            "700 root root /etc/private-llm/tls/.staged",
        ]
        # The gateways' scrape token: readable by the gateway and, on the monitoring host, Prometheus.
        tokens = "/etc/private-llm/metrics.token" + (
            " /etc/prometheus/private-llm-scrape.token" if host == lab_hosts.hosts[0] else "")
        assert _ssh(lab_hosts, host, f"stat -c '%a %U %G %n' {tokens}").split("\n")[:-1] == [
            "640 root private-llm /etc/private-llm/metrics.token",
            *(["640 root prometheus /etc/prometheus/private-llm-scrape.token"] if host == lab_hosts.hosts[0] else []),
        ]
        # The CA's key never leaves the control machine; nor does it show in any host's journal.
        ca_line = secrets[0]
        # (Config, logs and home directories: the venvs and the model under /opt and /var/lib
        # hold gigabytes and no file the installer writes secrets to.)
        found = _ssh(lab_hosts, host, f"grep -rlF -- '{ca_line}' /etc /var/log /root /var/lib/private-llm/*.json "
                     f"2>/dev/null; journalctl --no-pager -q | grep -cF -- '{ca_line}' || true")
        assert found.strip() == "0", found


def test_expiry_gauge_is_the_served_certificate(deployed: Run, lab_hosts, exported_ca: Path,
                                                e2e_state: Path) -> None:
    inv = _inv(lab_hosts)
    for host in lab_hosts.hosts:
        metrics = httpx.get(f"https://{host.address}:8080/metrics", headers=scrape_headers(e2e_state, inv.deployment),
                            verify=ssl.create_default_context(cafile=exported_ca)).text
        value = float(re.search(r"^pli_tls_cert_expiry_timestamp_seconds (\S+)$", metrics, re.M).group(1))
        served = _served_cert(host.address, 8080, exported_ca)
        assert value == served.not_valid_after_utc.timestamp()
        assert tls.days_to_expiry(inv, host.name) == pytest.approx((value - time.time()) / 86400, abs=0.01)


def test_renewal_under_streaming_load_drops_no_request(deployed: Run, lab_hosts, api_key: str,
                                                       e2e_state: Path, exported_ca: Path) -> None:
    inv = _inv(lab_hosts)
    h1 = lab_hosts.hosts[0]
    files = tls.host_files(inv, h1.name)
    client = tls.host_files(inv, lab_hosts.hosts[1].name)
    # h1's certificate now expires in 10 days: inside the renewal threshold.
    root = e2e_state / "tls" / inv.deployment
    authority = ca.Issued((root / "ca.pem").read_bytes(), (root / "ca.key").read_bytes())
    dns, addrs = tls.store.host_names(inv, inv.hosts[0])
    old = ca.issue_server(authority, h1.name, dns, addrs, inv.tls.cert_days,
                          now=dt.datetime.now(dt.UTC) - dt.timedelta(days=inv.tls.cert_days - 10))
    files.key.write_bytes(old.key_pem)
    files.cert.write_bytes(old.cert_pem)
    before = _served_cert(h1.address, 8080, exported_ca).serial_number

    load = Load([f"{gateway_base(inv, h.address)}/v1" for h in inv.hosts], api_key, inv.model.served_name,
                exported_ca, workers=3)
    with load:
        proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
        time.sleep(15)  # streams that started around the swap run to their end
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert f"{h1.name}: TLS certificate renewed (expires in 10." in proc.stdout
    # The lab's random-weight model sometimes ends an answer with EOS at once: a stream with no
    # content but a 200 and [DONE] (seen 2 in 706 streams). That is an answer, not a drop.
    dropped = [f for f in load.failed if "a stream without content" not in f]
    assert dropped == [], dropped[:5]
    assert load.ok >= 10 and len(load.per_endpoint) == len(inv.hosts)

    renewed = x509.load_pem_x509_certificate(files.cert.read_bytes())
    assert tls.days_to_expiry(inv, h1.name) > inv.tls.cert_days - 1
    # Gateway and engine of h1 serve the renewed certificate: neither was restarted for it.
    assert _served_cert(h1.address, 8080, exported_ca).serial_number == renewed.serial_number != before
    assert _served_cert(h1.address, 8000, exported_ca, client).serial_number == renewed.serial_number
    summary = latest_summary(e2e_state, "up")
    assert all(h["state"] == "ready" for h in summary["hosts"])
