"""The support archive's secret scan (installer/diagnostics/redact.py), data-driven: each file
of tests/unit/fixtures/diagnostics/ holds secrets planted where they turn up on a host (a
config file, an environment file, journal lines, redis.conf, a key), and expected.json says
which rules must report them, what must be gone and what is no secret and must stay."""

import json
from pathlib import Path

import pytest

from installer.diagnostics import redact

FIXTURES = Path(__file__).parent.parent / "fixtures" / "diagnostics"
EXPECTED = {k: v for k, v in json.loads((FIXTURES / "expected.json").read_text()).items() if not k.startswith("_")}
REDIS_PASSWORD = "5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_is_cut_and_reported_by_rule(name: str) -> None:
    want = EXPECTED[name]
    text, counts = redact.redact((FIXTURES / name).read_text())
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
