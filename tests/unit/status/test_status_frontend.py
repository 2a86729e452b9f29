"""The `vip` column of `installer status` (#37 item 1): the holder read from each gateway host's
`ip -o addr`, through the one SSH fan-out (stood in here by its result objects)."""

from pathlib import Path

import pytest

from installer.hosts import remote
from installer.inventory import Inventory
from installer.status import frontend
from installer.status.model import Context, Row

HOLDER = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "2: eth0    inet 10.0.0.2/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
    "2: eth0    inet 10.0.0.100/24 scope global secondary eth0\\       valid_lft forever\n"
)
BACKUP = "2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"


def _inv(tmp: Path) -> Inventory:
    (tmp / "w").mkdir(exist_ok=True)
    (tmp / "w" / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo", "engine": {"device": "cpu"}, "model": {"path": str(tmp / "w"), "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "10.0.0.1"}, {"name": "h2", "address": "10.0.0.2"}],
        "frontend": {"vip": "10.0.0.100/24", "router_id": 51},
    })


def test_holds_reads_ip_o_addr() -> None:
    assert frontend.holds(HOLDER, "10.0.0.100")
    assert not frontend.holds(BACKUP, "10.0.0.100")
    assert not frontend.holds(HOLDER, "10.0.0.10")  # a prefix of the address is not the address


def _collect(tmp: Path, monkeypatch: pytest.MonkeyPatch, answers: dict[str, tuple[int, str]]) -> list[Row]:
    seen: list[str] = []

    def run(targets, command, **kw):  # type: ignore[no-untyped-def]
        seen.append(command)
        return [remote.Result(t.name, answers[t.name][0], answers[t.name][1].encode(), "ssh: timeout", 0.1)
                for t in targets]

    monkeypatch.setattr(remote, "run", run)
    rows = [Row("h1", "10.0.0.1", "h1"), Row("h2", "10.0.0.2", "h2")]
    frontend.FrontendCollector().collect(Context(_inv(tmp), None), rows)
    assert seen == ["ip -o addr show"]  # one fan-out, one command
    return rows


def test_the_holder_is_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _collect(tmp_path, monkeypatch, {"h1": (0, BACKUP), "h2": (0, HOLDER)})
    assert [r.values["vip"] for r in rows] == [False, True]
    assert not any(r.problems for r in rows)


def test_nobody_or_two_holders_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _collect(tmp_path, monkeypatch, {"h1": (0, BACKUP), "h2": (0, BACKUP)})
    assert all("no gateway host holds the VIP 10.0.0.100/24" in r.problems[0] for r in rows)
    rows = _collect(tmp_path, monkeypatch, {"h1": (0, HOLDER), "h2": (0, HOLDER)})
    assert all("is on h1, h2 at once" in r.problems[0] for r in rows)


def test_an_unreadable_host_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _collect(tmp_path, monkeypatch, {"h1": (255, ""), "h2": (0, HOLDER)})
    assert "vip" not in rows[0].values and "ssh: timeout" in rows[0].problems[0]
    assert rows[1].values["vip"] is True
