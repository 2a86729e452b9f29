"""The support archive's secret scan (installer/diagnostics/redact.py), data-driven: each file
of tests/unit/fixtures/diagnostics/ holds secrets planted where they turn up on a host (a
config file, an environment file, journal lines, redis.conf, a key), and expected.json says
which rules must report them, what must be gone and what is no secret and must stay."""

import json
import urllib.parse
from pathlib import Path

import jinja2
import pytest

from installer.diagnostics import redact

FIXTURES = Path(__file__).parent.parent / "fixtures" / "diagnostics"
EXPECTED = {k: v for k, v in json.loads((FIXTURES / "expected.json").read_text()).items() if not k.startswith("_")}
ALERTMANAGER = Path(__file__).parents[3] / "playbooks/roles/monitoring/templates/alertmanager.yml.j2"
REDIS_PASSWORD = "5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_is_cut_and_reported_by_rule(name: str) -> None:
    want = EXPECTED[name]
    text, counts = redact.redact((FIXTURES / name).read_text(), path=name)
    assert dict(counts) == want["hits"]
    for secret in want["gone"]:
        assert secret not in text
    for plain in want["kept"]:
        assert plain in text
    for rule in want["hits"]:
        assert f"[REDACTED:{rule}]" in text


def test_a_secret_the_control_machine_knows_is_cut_in_any_form() -> None:
    # the deployment's Redis password, as requirepass and inside a URL: both reported as known
    for name in ("redis.conf", "gateway.yml"):
        text, counts = redact.redact((FIXTURES / name).read_text(), {"redis-password": REDIS_PASSWORD})
        assert REDIS_PASSWORD not in text and counts["known-redis-password"] == 1
        assert "redis-password" not in counts and "url-password" not in counts
    text, counts = redact.redact(f"a line printed {REDIS_PASSWORD[:40]}... and {REDIS_PASSWORD}",
                                 {"redis-password": REDIS_PASSWORD})
    assert text.endswith("and [REDACTED:known-redis-password]") and counts == {"known-redis-password": 1}


@pytest.mark.parametrize("shown", [
    "{s}", "{q}", "{qp}", "{q_lower}", "{j}", "{j_slash}", "{html}",
])
def test_a_known_secret_is_cut_url_encoded_or_json_escaped(shown: str) -> None:
    secret = "p@ss/w0rd+&'<x> \"q\""
    text = shown.format(
        s=secret, q=urllib.parse.quote(secret, safe=""), qp=urllib.parse.quote_plus(secret),
        q_lower=urllib.parse.quote(secret, safe="").lower(), j=json.dumps(secret)[1:-1],
        j_slash=json.dumps(secret)[1:-1].replace("/", "\\/"),
        html=jinja2.Environment().from_string("{{ v | tojson }}").render(v=secret)[1:-1])
    assert text != secret or shown == "{s}"
    out, counts = redact.redact(f"GET /relay?to={text} failed", {"redis-password": secret})
    assert out == "GET /relay?to=[REDACTED:known-redis-password] failed"
    assert counts == {"known-redis-password": 1}


def test_the_inventory_webhook_url_is_cut_as_alertmanager_renders_it() -> None:
    """The webhook's path is the credential (Slack, PagerDuty): as the monitoring role writes
    alertmanager.yml, it is cut as a known secret, and by the file's own rule when unknown."""
    url = "https://pager.example.internal/v1/hook/9f8e7d6c5b4a?routing=abc&tok=s3cr3t'x"
    rendered = jinja2.Environment().from_string(ALERTMANAGER.read_text()).render(
        monitoring_webhook_url=url, ansible_managed="Ansible managed")
    name = "config/etc/prometheus/alertmanager.yml"
    text, counts = redact.redact(rendered, {"webhook-url": url}, name)
    assert "9f8e7d6c5b4a" not in text and "s3cr3t" not in text and counts == {"known-webhook-url": 1}
    text, counts = redact.redact(rendered, {}, name)
    assert "9f8e7d6c5b4a" not in text and counts == {"alertmanager-url": 1}
    assert 'url: "[REDACTED:alertmanager-url]"' in text and "send_resolved: true" in text
    # a Slack webhook anywhere else (a journal line) has a rule of its own
    text, counts = redact.redact("post to https://hooks.slack.com/services/T0/B0/XXXXxxxx failed: 404")
    assert text == "post to [REDACTED:webhook-url] failed: 404" and counts == {"webhook-url": 1}


def test_scan_reports_file_and_rule_never_the_value() -> None:
    files = {name: (FIXTURES / name).read_bytes() for name in EXPECTED}
    out, hits = redact.scan(files)
    assert set(out) == set(files)
    reported = {(h.file, h.rule): h.count for h in hits}
    assert reported == {(name, rule): n for name, want in EXPECTED.items() for rule, n in want["hits"].items()}
    shown = json.dumps([h.to_json() for h in hits])
    for want in EXPECTED.values():
        assert all(secret not in shown for secret in want["gone"])
    assert all(secret.encode() not in b"".join(out.values()) for w in EXPECTED.values() for secret in w["gone"])


def test_a_clean_file_is_left_byte_for_byte() -> None:
    clean = b"HF_HUB_OFFLINE=1\nmax_tokens: 64\nkeys_file: /etc/private-llm/keys.json\ntoken: null\n"
    out, hits = redact.scan({"engine.env": clean})
    assert out == {"engine.env": clean} and hits == []
