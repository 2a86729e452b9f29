"""auth.tenants and audit reach the gateways (#38 items 2, 3): the rendered gateway.yml has a
tenants section and a request_audit section the gateway accepts; `audit.requests: false` leaves
the trail out."""

from pathlib import Path
from typing import Any

import pytest

from installer.planning import plan as deployment_plan
from service.config import Settings
from tests.support.engine_role import rendered_vars
from tests.support.gateway_role import gateway_config, one_host


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _settings(tmp_path: Path, **inventory: Any) -> Settings:
    variables = rendered_vars(deployment_plan.build(one_host(tmp_path, **inventory)), "h1")
    config = gateway_config({**variables, "gateway_workers": 1, "gateway_redis_url": ""})
    keys = tmp_path / "keys.json"
    keys.write_text('{"version": 1, "keys": []}')
    return Settings.model_validate({**config, "keys_file": str(keys)})


def test_tenants_and_the_request_audit_reach_the_gateway_config(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        auth={"tenants": [{"name": "research", "rpm": 60, "keys": ["ci"]}, {"name": "general", "tpm": 1000}]},
        audit={"retention_days": 90, "max_mb_per_day": 5},
    )
    assert settings.tenants is not None and settings.tenants.default is None
    assert [(t.name, t.rpm, t.tpm, t.keys) for t in settings.tenants.tenants] == [
        ("research", 60, None, ["ci"]),
        ("general", None, 1000, []),
    ]
    assert settings.request_audit is not None
    audit = settings.request_audit
    assert (str(audit.dir), audit.retention_days) == ("/var/lib/private-llm/audit", 90)
    assert audit.max_bytes_per_day == 5 << 20


def test_without_tenants_none_and_the_trail_can_be_turned_off(tmp_path: Path) -> None:
    settings = _settings(tmp_path, audit={"requests": False})
    assert settings.tenants is None and settings.request_audit is None
    assert _settings(tmp_path).request_audit is not None  # on by default
