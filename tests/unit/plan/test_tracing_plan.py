"""monitoring.otlp_endpoint (#35 item 4): checked where it is written, then turned into the engines'
--otlp-traces-endpoint with vLLM's OTLP/HTTP protocol, and the gateways' tracing section; absent,
nothing of either is written."""

from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import InventoryError
from installer.inventory import Inventory, load_inventory
from installer.planning import plan as deployment_plan
from service.config import Settings
from tests.support.engine_role import exec_argv, render_role, rendered_vars
from tests.support.gateway_role import gateway_config, one_host

COLLECTOR = "http://otel.example.internal:4318"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _inventory(tmp_path: Path, **monitoring: Any) -> Inventory:
    return one_host(tmp_path, monitoring=monitoring)


def _gateway_settings(variables: dict[str, Any]) -> Settings:
    return Settings.model_validate(gateway_config({**variables, "gateway_workers": 1, "gateway_redis_url": ""}))


def test_a_collector_reaches_the_engines_argv_env_and_the_gateways_config(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, otlp_endpoint=COLLECTOR + "/", trace_sample_ratio=0.25)
    plan = deployment_plan.build(inv)
    (engine,) = plan.hosts[0].engines
    at = engine.argv.index("--otlp-traces-endpoint")
    assert engine.argv[at + 1] == COLLECTOR + "/v1/traces"
    assert ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf") in engine.env  # vLLM's default is gRPC
    variables = rendered_vars(plan, "h1")
    units = render_role(tmp_path / "role", variables)
    assert exec_argv(units["private-llm-engine"])[-2:] == ["--otlp-traces-endpoint", COLLECTOR + "/v1/traces"]
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf" in units["private-llm-engine"]
    tracing = _gateway_settings(variables).tracing
    assert tracing is not None
    assert (tracing.otlp_endpoint, tracing.sample_ratio) == (COLLECTOR + "/", 0.25)


def test_without_a_collector_nothing_is_written(tmp_path: Path) -> None:
    plan = deployment_plan.build(_inventory(tmp_path))
    (engine,) = plan.hosts[0].engines
    assert not any(a.startswith("--otlp") for a in engine.argv)
    assert not any(k.startswith("OTEL_") for k, _ in engine.env)
    assert _gateway_settings(rendered_vars(plan, "h1")).tracing is None


@pytest.mark.parametrize(("line", "message"), [
    ("  otlp_endpoint: otel.example.internal:4318\n",
     "monitoring.otlp_endpoint: 'otel.example.internal:4318' is not an http:// or https:// URL"),
    ("  otlp_endpoint: http://user:token@otel:4318\n",
     "monitoring.otlp_endpoint: 'http://user:token@otel:4318' is not"),
    ("  otlp_endpoint: http://otel:4318/?k=v\n", "is not an http:// or https:// URL without a user, query or fragment"),
    ("  trace_sample_ratio: 2\n", "monitoring.trace_sample_ratio: Input should be less than or equal to 1"),
])
def test_a_bad_collector_setting_is_refused_at_its_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: demo\nhosts:\n  - {name: h1, address: 10.0.0.1}\nmodel: {path: w, served_name: tiny}\n"
        "monitoring:\n" + line
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert len(err.value.details) == 1
    assert err.value.details[0].startswith(f"{path}:6: ")
    assert message in err.value.details[0]


def test_extra_args_may_not_set_the_engines_collector(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: demo\nhosts:\n  - {name: h1, address: 10.0.0.1}\nmodel: {path: w, served_name: tiny}\n"
        "engine:\n  extra_args: ['--otlp-traces-endpoint=http://elsewhere:4317']\n"
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert err.value.details == [
        f"{path}:6: engine.extra_args[0]: vLLM reads '--otlp-traces-endpoint=http://elsewhere:4317' as "
        "--otlp-traces-endpoint, which is set by the installer; remove it from extra_args and set "
        "monitoring.otlp_endpoint: the engines then export over OTLP/HTTP to the collector the gateways "
        "export to, under the gateways' spans"
    ]


def test_an_inventory_without_a_collector_keeps_its_config_digest(tmp_path: Path) -> None:
    # revisions.config_digest hashes the dump: the new keys appear in it only when written
    dumped = _inventory(tmp_path).model_dump()["monitoring"]
    assert "otlp_endpoint" not in dumped and "trace_sample_ratio" not in dumped
    dumped = _inventory(tmp_path, otlp_endpoint=COLLECTOR).model_dump()["monitoring"]
    assert dumped["otlp_endpoint"] == COLLECTOR and "trace_sample_ratio" not in dumped
