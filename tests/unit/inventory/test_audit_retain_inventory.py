"""audit.retain in the inventory (#38 item 3, docs/audit.md#keeping-prompts-and-answers): what
`validate` refuses at the setting's file and line, and what reaches the gateways' config (which
accepts it); unset, the inventory and the gateways' config are as before."""

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from installer.ansible.render import _tenant_vars
from installer.base.errors import InventoryError
from installer.flows.request_audit import COLUMNS, to_csv
from installer.inventory import load_inventory
from installer.inventory.audit import AuditRetain
from installer.planning import plan as deployment_plan
from service.audit_retain import BUILTIN
from service.config import Settings
from tests.support.engine_role import rendered_vars
from tests.support.gateway_role import gateway_config, one_host
from tests.support.site_file import site_file


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _settings(tmp_path: Path, audit: dict[str, Any]) -> Settings:
    """The gateway's settings from gateway.yml as the role renders it for host h1."""
    variables = rendered_vars(deployment_plan.build(one_host(tmp_path, audit=audit)), "h1")
    config = gateway_config({**variables, "gateway_workers": 1, "gateway_redis_url": ""})
    keys = tmp_path / "keys.json"
    keys.write_text('{"version": 1, "keys": []}')
    return Settings.model_validate({**config, "keys_file": str(keys)})


def _refused(path: Path) -> str:
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    return str(err.value) + "\n" + "\n".join(err.value.details)


def test_the_builtin_names_are_the_gateways() -> None:
    assert [r.gateway() for r in AuditRetain().redact] == list(BUILTIN)


def test_retain_reaches_the_gateways_config_which_accepts_it(tmp_path: Path) -> None:
    path = site_file(tmp_path, (
        "audit:\n  retain:\n    prompts: true\n    answers: true\n    max_chars: 4000\n    redact:\n"
        "      - email\n      - api_key\n      - {name: employee_id, pattern: '\\bEMP-\\d{6}\\b'}\n"
    ))
    inv = load_inventory(path)
    rendered = _tenant_vars(type("P", (), {"inventory": inv})())["gateway_request_audit"]  # type: ignore[arg-type]
    assert rendered["retain"] == {
        "prompts": True, "answers": True, "max_chars": 4000,
        "redact": ["email", "api_key", {"name": "employee_id", "pattern": r"\bEMP-\d{6}\b"}],
    }
    # the gateway role's gateway.yml, as Ansible writes it from the plan, read by the gateway
    cfg = _settings(tmp_path, {"retain": {"prompts": True, "answers": True, "max_chars": 4000, "redact": [
        "email", "api_key", {"name": "employee_id", "pattern": r"\bEMP-\d{6}\b"}]}}).request_audit
    assert cfg is not None and cfg.retain is not None and cfg.retain.max_chars == 4000
    assert cfg.retain.redact[2].pattern == r"\bEMP-\d{6}\b"  # type: ignore[union-attr]
    assert cfg.retain.prompts and cfg.retain.answers


def test_without_retain_nothing_changes(tmp_path: Path) -> None:
    inv = load_inventory(site_file(tmp_path, "audit:\n  retention_days: 30\n"))
    assert "retain" not in inv.model_dump(mode="json")["audit"]
    rendered = _tenant_vars(type("P", (), {"inventory": inv})())  # type: ignore[arg-type]
    assert rendered["gateway_request_audit"] == {"retention_days": 30, "max_bytes_per_day": 1 << 30}
    cfg = _settings(tmp_path, {"retention_days": 30}).request_audit
    assert cfg is not None and cfg.retain is None


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("'a*'", "can match the empty string"),
        ("'(?=secret)'", "can match the empty string"),
        ("'(unclosed'", "does not compile"),
    ],
    ids=["star", "lookahead", "unclosed"],
)
def test_a_bad_pattern_is_refused_at_its_line(tmp_path: Path, pattern: str, message: str) -> None:
    path = site_file(tmp_path, (
        "audit:\n  retain:\n    prompts: true\n    redact:\n      - email\n"
        f"      - name: mine\n        pattern: {pattern}\n"
    ))
    text = _refused(path)
    assert f"site.yml:{_line_of(path, '        pattern:')}:" in text and message in text, text


@pytest.mark.parametrize(
    ("redact", "message"),
    [("[phone]", "'phone' is no built-in redaction"), ("[email, email]", "each redaction name once"),
     ("[{name: Bad Name, pattern: x}]", "a redaction name"),
     ("[email]\n  requests: false", "set audit.requests: true, or drop retain")],
    ids=["unknown-builtin", "twice", "bad-name", "no-trail"],
)
def test_bad_redactions_are_refused(tmp_path: Path, redact: str, message: str) -> None:
    path = site_file(tmp_path, f"audit:\n  retain:\n    prompts: true\n    redact: {redact}\n")
    text = _refused(path)
    assert "site.yml:" in text and message in text, text


def test_the_csv_has_the_texts_only_when_kept_as_json() -> None:
    plain = {"host": "h1", "seq": 1, "status": 200}
    assert next(csv.reader(io.StringIO(to_csv([plain])))) == list(COLUMNS)
    kept = {**plain, "prompt": [{"role": "user", "content": "=1+1"}], "answer": "=cmd", "answer_cut": True}
    rows = list(csv.DictReader(io.StringIO(to_csv([plain, kept]))))
    assert list(rows[0])[-3:] == ["prompt", "answer", "answer_cut"]
    # JSON in the cell: a message list or a quoted string, never a bare formula
    assert rows[1]["prompt"] == '[{"role": "user", "content": "=1+1"}]' and rows[1]["answer"] == '"=cmd"'
    assert rows[0]["prompt"] == ""
