"""`up`'s VRRP preflight (#37 item 1): a frontend router id that another router on the link
advertises is refused before any host changes, naming the sender; our own hosts' adverts pass.
The SSH edge (remote.run_one) is stood in; the listener itself runs on real adverts in
tests/integration/test_keepalived_failover.py."""

from pathlib import Path

import pytest

from installer.base.errors import PreflightError
from installer.hosts import remote
from installer.inventory import Inventory
from installer.preflight import vrrp


def _inv(tmp: Path, **top: object) -> Inventory:
    (tmp / "w").mkdir(exist_ok=True)
    (tmp / "w" / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo", "engine": {"device": "cpu"}, "model": {"path": str(tmp / "w"), "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "10.0.0.1"}, {"name": "h2", "address": "10.0.0.2"}], **top,
    })


def _runner(answers: dict[str, str], seen: list[str]):  # type: ignore[no-untyped-def]
    def run_one(t, command, **kw):  # type: ignore[no-untyped-def]
        seen.append(command)
        return remote.Result(t.name, 0, answers[t.name].encode(), "", 0.1)
    return run_one


def test_parse_and_foreign() -> None:
    heard = vrrp.parse("10.0.0.2 51\n10.0.0.9 51\n10.0.0.9 52\nnoise\n")
    assert heard == {("10.0.0.2", 51), ("10.0.0.9", 51), ("10.0.0.9", 52)}
    assert vrrp.foreign(heard, 51, {"10.0.0.1", "10.0.0.2"}) == ["10.0.0.9"]
    assert vrrp.foreign(heard, 53, {"10.0.0.1", "10.0.0.2"}) == []


def test_a_foreign_router_with_our_id_is_refused(tmp_path: Path) -> None:
    inv = _inv(tmp_path, frontend={"vip": "10.0.0.100/24", "router_id": 51})
    seen: list[str] = []
    with pytest.raises(PreflightError) as err:
        vrrp.check(inv, _runner({"h1": "10.0.0.2 51\n10.0.0.9 51\n", "h2": "10.0.0.9 52\n"}, seen))
    (problem,) = err.value.details
    assert problem.startswith("h1 (10.0.0.1): 10.0.0.9") and "router id 51" in problem
    assert "no host was changed" in str(err.value)
    assert all(c.startswith("python3 -c ") and c.endswith(" 3.0") for c in seen) and len(seen) == 2


def test_our_own_adverts_and_other_ids_pass(tmp_path: Path) -> None:
    inv = _inv(tmp_path, frontend={"vip": "10.0.0.100/24", "router_id": 51})
    vrrp.check(inv, _runner({"h1": "10.0.0.2 51\n", "h2": "10.0.0.1 51\n10.0.0.9 52\n"}, []))


def test_no_frontend_listens_nowhere(tmp_path: Path) -> None:
    seen: list[str] = []
    vrrp.check(_inv(tmp_path), _runner({}, seen))
    assert seen == []
