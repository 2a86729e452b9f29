"""The `cert` column of `installer status`: days left on the certificate `installer up` issued
each host (real certificates from the deployment CA, written where `installer up` keeps them),
coloured red inside the alert's window and yellow inside tls.renew_before_days."""

import datetime as dt
from pathlib import Path

import pytest
import yaml

from installer import status as st
from installer.base.paths import PLAYBOOKS_DIR
from installer.inventory.models import Inventory
from installer.status.cert import CertCollector, alert_days, days_text
from installer.tls import ca, store


def _inventory(mode: str = "issue", renew: int = 30) -> Inventory:
    return Inventory.model_validate({
        "deployment": "certs", "model": {"path": "/m", "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "127.0.0.1"}, {"name": "h2", "address": "127.0.0.2"},
                  {"name": "h3", "address": "127.0.0.3"}],
        "tls": {"mode": mode, **({"renew_before_days": renew} if mode != "off" else {})},
    })


def _issue(inv: Inventory, host: str, days: int, authority: ca.Issued) -> None:
    issued = ca.issue_server(authority, host, [host], [], days)
    files = store.host_files(inv, host)
    files.cert.parent.mkdir(parents=True, exist_ok=True)
    files.cert.write_bytes(issued.cert_pem)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path))
    return tmp_path


def test_days_left_per_host_in_json_and_coloured_in_the_table(state: Path) -> None:
    inv = _inventory(renew=30)
    authority = store.ensure_ca(inv.deployment)
    _issue(inv, "h1", 90, authority)
    _issue(inv, "h2", 20, authority)  # inside renew_before_days: the next `installer up` renews it
    _issue(inv, "h3", 5, authority)  # inside the alert's 14 days
    report = st.collect(st.Context(inv, None), [CertCollector()], lambda h: [h.name])
    left = {r["host"]: r["cert_days_left"] for r in report.to_json()["rows"]}
    assert 89.9 < left["h1"] <= 90 and 19.9 < left["h2"] <= 20 and 4.9 < left["h3"] <= 5
    cells = {row[0]: row[-1] for row in report.table_rows()}
    assert cells["h1"] == "90 d"
    assert cells["h2"] == "[yellow]20 d[/]"
    assert cells["h3"] == "[bold red]5 d[/]"
    assert all(not r.problems for r in report.rows)


def test_yellow_follows_the_inventorys_renewal_window(state: Path) -> None:
    inv = _inventory(renew=60)
    authority = store.ensure_ca(inv.deployment)
    for host in ("h1", "h2", "h3"):
        _issue(inv, host, 50, authority)
    report = st.collect(st.Context(inv, None), [CertCollector()], lambda h: [h.name])
    assert report.table_rows()[0][-1] == "[yellow]50 d[/]"


def test_missing_or_expired_certificates_are_problems_and_tls_off_is_empty(state: Path) -> None:
    inv = _inventory()
    authority = store.ensure_ca(inv.deployment)
    now = dt.datetime.now(dt.UTC)
    expired = ca.issue_server(authority, "h2", ["h2"], [], 2, now=now - dt.timedelta(days=5))
    path = store.host_files(inv, "h2").cert
    path.parent.mkdir(parents=True)
    path.write_bytes(expired.cert_pem)
    report = st.collect(st.Context(inv, None), [CertCollector()], lambda h: [h.name])
    h1, h2, _ = report.rows
    assert h1.values["cert_days_left"] is None and "run `installer up`" in h1.problems[0]
    assert h2.values["cert_days_left"] < 0 and "expired 3 day(s) ago" in h2.problems[0]
    assert report.table_rows()[1][-1].startswith("[bold red]-3")

    off = st.collect(st.Context(_inventory("off"), None), [CertCollector()], lambda h: [h.name])
    assert [r.values["cert_days_left"] for r in off.rows] == [None] * 3
    assert all(not r.problems for r in off.rows) and off.table_rows()[0][-1] == "-"


def test_the_red_limit_is_the_alerts_and_the_column_is_built_in() -> None:
    defaults = yaml.safe_load((PLAYBOOKS_DIR / "roles/monitoring/defaults/main.yml").read_text())
    assert alert_days() == defaults["monitoring_cert_expiry_warn_days"] == 14
    # Red exactly when the alert's condition holds (expiry - time() < 14 days), whatever the rounding.
    assert days_text(30)(13.8) == "[bold red]14 d[/]" and days_text(30)(14.2) == "[yellow]14 d[/]"
    assert any(isinstance(c, CertCollector) for c in st.COLLECTORS)
