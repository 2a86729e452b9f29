"""Gateway settings refuse unsafe or misspelled configuration, with the key named."""

from pathlib import Path

import httpx
import openai
import pytest
import yaml

from service.config import ConfigError, LimitsConfig, load_settings

ENGINE = {"name": "e1", "url": "http://127.0.0.1:8000", "model": "m"}


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, object]):  # type: ignore[no-untyped-def]
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("PLI_GATEWAY_CONFIG", str(path))
    return load_settings()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"engines": [ENGINE]}, "keys_file is required"),
        (
            {"engines": [ENGINE], "keys_file": "/k", "allow_anonymous": True},
            "either keys_file or allow_anonymous",
        ),
        (
            {"engines": [ENGINE], "allow_anonymous": True, "limts": {}},
            "limts: Extra inputs are not permitted",
        ),
        ({"engines": [], "allow_anonymous": True}, "engines"),
        ({"engines": [ENGINE, ENGINE], "allow_anonymous": True}, "engine names must be unique"),
        (
            {"engines": [{**ENGINE, "url": "http://h:1/v1"}], "allow_anonymous": True},
            "engines.0.url",
        ),
        ({"engines": [ENGINE], "allow_anonymous": True, "metrics_port": 9100}, "go together"),
        (
            {"engines": [ENGINE], "keys_file": "/k", "tenants": {"tenants": [
                {"name": "free", "rpm": 5}, {"name": "paid", "quota_tokens": 9, "quota_period": "day"}]}},
            r"tenant\(s\) paid have a token quota, which is kept in Redis: set limits.redis_url",
        ),
        (
            {"engines": [ENGINE], "allow_anonymous": True, "metrics_host": "0.0.0.0", "metrics_port": 9100},
            "metrics_host 0.0.0.0 is not a loopback address: set metrics_token_file",
        ),
    ],
)
def test_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, monkeypatch, config)


def test_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLI_GATEWAY_LIMITS__MAX_IN_FLIGHT", "7")
    monkeypatch.setenv("PLI_GATEWAY_PORT", "9001")
    settings = _load(
        tmp_path,
        monkeypatch,
        {"engines": [ENGINE], "keys_file": "/etc/k.json", "session_header": "X-Session"},
    )
    assert settings.port == 9001 and settings.limits.max_in_flight == 7
    assert settings.session_header == "x-session"
    assert settings.host == "127.0.0.1"  # public binding is a deliberate choice


def test_missing_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLI_GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    with pytest.raises(ConfigError, match="no such file"):
        load_settings()


def test_idle_connections_outlive_the_clients_pools() -> None:
    # httpx (and the openai client on it) reuses a pooled connection until it has been idle this
    # long; a gateway that closed it at the same moment would race the next request sent on it.
    client_expiry = max(httpx.Limits().keepalive_expiry or 0, openai.DEFAULT_CONNECTION_LIMITS.keepalive_expiry or 0)
    assert LimitsConfig().keepalive_timeout_s >= client_expiry + 2
