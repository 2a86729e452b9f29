"""The control machine's key store: 0600, hashes only, secret shown once; the hosts' file has
no secret and no revoked key."""

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.cli import app

# Both command modules: a typer app with a single command would run it without its name.
from installer.cli import bench as _bench_cli  # noqa: F401
from installer.cli import keys as _keys_cli  # noqa: F401
from installer.secrets import keys
from service.keyfile import hash_secret


def test_create_list_revoke(tmp_path: Path) -> None:
    store = tmp_path / "keys.json"
    record, secret = keys.create("team-a", rpm=60, tpm=1000, models=["m"], path=store)
    assert secret.startswith("sk-pli-") and record.sha256 == hash_secret(secret)
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert secret not in store.read_text()
    with pytest.raises(keys.KeyStoreError, match="active key named 'team-a'"):
        keys.create("team-a", path=store)
    keys.create("team-b", path=store)
    keys.revoke("team-a", path=store)
    with pytest.raises(keys.KeyStoreError, match="no unrevoked key"):
        keys.revoke("team-a", path=store)
    hosts = json.loads(keys.render_hosts_file(keys.load(store)))
    assert [k["name"] for k in hosts["keys"]] == ["team-b"]
    assert set(hosts["keys"][0]) == {"name", "sha256", "rpm", "tpm", "models", "expires"}
    keys.create("team-a", path=store)  # a revoked name can be reused


@pytest.mark.parametrize("name", ["", "Upper", "has space", "-lead", "x" * 64])
def test_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(keys.KeyStoreError, match="key name"):
        keys.create(name, path=tmp_path / "k.json")


def test_expiry() -> None:
    assert keys.parse_expiry("2031-02-03") == datetime(2031, 2, 3, tzinfo=UTC)
    assert keys.parse_expiry("2031-02-03T04:05:00").tzinfo == UTC
    with pytest.raises(keys.KeyStoreError, match="YYYY-MM-DD"):
        keys.parse_expiry("tomorrow")
    with pytest.raises(keys.KeyStoreError, match="in the past"):
        keys.create("k", expires=datetime(2000, 1, 1, tzinfo=UTC), path=Path("/nonexistent/k.json"))


def test_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    created = runner.invoke(
        app, ["keys", "create", "--name", "svc", "--rpm", "5", "--models", "a,b"]
    )
    assert created.exit_code == 0, created.output
    secret = next(line for line in created.output.splitlines() if line.startswith("sk-pli-"))
    listed = runner.invoke(app, ["keys", "list"])
    assert "svc" in listed.output and "active" in listed.output and secret not in listed.output
    assert runner.invoke(app, ["keys", "revoke", "svc"]).exit_code == 0
    assert "revoked" in runner.invoke(app, ["keys", "list"]).output
    assert secret not in (tmp_path / "keys.json").read_text()
