"""redis.replicas (#37 item 2): where the replica and the three sentinels go, and what `validate`
refuses at the setting's file:line before any host is touched."""

from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory, redis_ha


def _inventory(tmp_path: Path, hosts: list[str], redis: str = "") -> Path:
    model = tmp_path / "weights"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    rows = "".join(f"  - {h}\n" for h in hosts)
    path = tmp_path / "site.yml"
    path.write_text(f"deployment: demo\nengine: {{device: cpu}}\nmodel: {{path: {model}, served_name: tiny}}\n"
                    f"hosts:\n{rows}{redis}")
    return path


def _host(i: int, groups: str = "") -> str:
    return f"{{name: h{i}, address: 10.0.0.{i}{', groups: ' + groups if groups else ''}}}"


def _refused(path: Path) -> list[str]:
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    return list(err.value.details)


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_auto_runs_a_replica_and_three_sentinels_with_three_serving_hosts(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, [_host(1), _host(2), _host(3)]))
    found = redis_ha.layout(inv)
    assert found is not None
    assert (found.primary.name, [h.name for h in found.replicas]) == ("h1", ["h2"])
    assert [h.name for h in found.sentinels] == ["h1", "h2", "h3"]


def test_auto_puts_the_third_sentinel_on_a_monitoring_host(tmp_path: Path) -> None:
    hosts = [_host(1), _host(2), _host(3, "[monitoring]")]
    found = redis_ha.layout(load_inventory(_inventory(tmp_path, hosts)))
    assert found is not None and [h.name for h in found.sentinels] == ["h1", "h2", "h3"]


def test_auto_keeps_one_redis_where_no_third_host_can_vote(tmp_path: Path) -> None:
    for hosts in ([_host(1)], [_host(1), _host(2)]):
        found = redis_ha.layout(load_inventory(_inventory(tmp_path, hosts)))
        assert found is not None and (found.replicas, found.sentinels) == ((), ())
    found = redis_ha.layout(load_inventory(_inventory(tmp_path, [_host(1), _host(2)], "redis: {replicas: 0}\n")))
    assert found is not None and found.sentinels == ()


def test_a_single_serving_host_asking_for_sentinel_is_refused_at_its_line(tmp_path: Path) -> None:
    path = _inventory(tmp_path, [_host(1)], "redis:\n  replicas: 1\n")
    [problem] = _refused(path)
    assert problem.startswith(f"{path}:{_line(path, 'replicas: 1')}: ")
    assert "one serving host" in problem and "redis.replicas: 0" in problem


def test_a_sentinel_quorum_that_cannot_exist_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = _inventory(tmp_path, [_host(1), _host(2)], "redis:\n  replicas: 1\n")
    [problem] = _refused(path)
    assert problem.startswith(f"{path}:{_line(path, 'replicas: 1')}: ")
    assert "Sentinel on 3 hosts" in problem and "groups: [monitoring]" in problem and "h1, h2" in problem


def test_more_replicas_than_hosts_are_refused(tmp_path: Path) -> None:
    path = _inventory(tmp_path, [_host(1), _host(2), _host(3)], "redis:\n  replicas: 3\n")
    [problem] = _refused(path)
    assert "needs 4 serving hosts" in problem and "redis.replicas: 2" in problem


def test_replicas_take_auto_or_a_small_count(tmp_path: Path) -> None:
    for bad in ("yes", "-1", "9"):
        path = _inventory(tmp_path, [_host(1), _host(2), _host(3)], f"redis:\n  replicas: {bad}\n")
        assert any("replicas" in p for p in _refused(path)), bad


def test_a_sentinel_port_that_clashes_is_refused(tmp_path: Path) -> None:
    hosts = [_host(1), _host(2), _host(3)]
    path = _inventory(tmp_path, hosts, "redis: {replicas: 1}\nports:\n  redis_sentinel: 8080\n")
    [problem] = _refused(path)
    assert problem.startswith(f"{path}:{_line(path, 'redis_sentinel: 8080')}: ")
