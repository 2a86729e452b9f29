"""redis.on_unavailable (#37 item 2): refused at its line when it is neither open nor closed,
rendered into every gateway's settings as limits.redis_on_unavailable when closed, and left out
of gateway.yml and of the inventory's dump when unset, so a deployment keeping the default keeps
its files and its config digest."""

from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from service.config import Settings
from tests.support.engine_role import rendered_vars
from tests.support.gateway_role import gateway_config, one_host


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _gateway_yml(tmp_path: Path, **sections: object) -> dict[str, object]:
    plan = deployment_plan.build(one_host(tmp_path, **sections))
    return gateway_config({**rendered_vars(plan, "h1"), "gateway_workers": 1})


def test_closed_reaches_the_gateways_settings(tmp_path: Path) -> None:
    config = _gateway_yml(tmp_path, redis={"on_unavailable": "closed"})
    assert config["limits"]["redis_on_unavailable"] == "closed"  # type: ignore[index]
    assert Settings.model_validate(config).limits.redis_on_unavailable == "closed"


def test_the_default_writes_nothing_new(tmp_path: Path) -> None:
    config = _gateway_yml(tmp_path)
    assert "redis_on_unavailable" not in config["limits"]  # type: ignore[operator]
    assert config["limits"]["redis_url"]  # type: ignore[index]  # a lone serving host still has its Redis
    assert Settings.model_validate(config).limits.redis_on_unavailable == "open"
    assert "redis" not in one_host(tmp_path).model_dump(mode="json")
    assert one_host(tmp_path, redis={"on_unavailable": "open"}).model_dump(mode="json")["redis"] == {
        "on_unavailable": "open", "replicas": "auto"  # a written redis: section dumps its defaults
    }


@pytest.mark.parametrize(("line", "message"), [
    ("  on_unavailable: fail\n", "redis.on_unavailable: Input should be 'open' or 'closed'"),
    ("  on_unavailabel: closed\n", "redis.on_unavailabel: unknown key"),
])
def test_a_bad_setting_is_refused_at_its_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: demo\nhosts:\n  - {name: h1, address: 10.0.0.1}\nmodel: {path: w, served_name: tiny}\n"
        "redis:\n" + line
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert len(err.value.details) == 1
    assert err.value.details[0].startswith(f"{path}:6: ")
    assert message in err.value.details[0]
