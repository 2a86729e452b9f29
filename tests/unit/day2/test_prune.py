"""`installer up --prune` (day2/uninstall.prune): the departed host's engines are drained on the
gateways that stay, by the names they had in the deployment, before anything is removed.

The e2e run of 2026-12-01 found prune crashing here: it asked the new inventory's plan for the
departed host's engine names, and that plan has no such host.
"""

from pathlib import Path
from typing import Any

import pytest

from installer.ansible.runner import HostResult, PlaybookResult
from installer.day2 import drain, uninstall
from installer.inventory import Host, load_inventory
from installer.planning import plan


def _inventory(root: Path, hosts: str) -> Path:
    (root / "weights").mkdir(exist_ok=True)
    (root / "weights" / "config.json").write_text("{}")
    path = root / "site.yml"
    path.write_text(
        f"deployment: demo\nhosts: {hosts}\n"
        "model: {path: weights, served_name: tiny}\nengine: {device: cpu}\n"
    )
    return path


def test_the_departed_hosts_engines_are_drained_on_the_gateways_that_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    both = load_inventory(_inventory(tmp_path, "[{name: a, address: 10.0.0.1}, {name: b, address: 10.0.0.2}]"))
    deployed = set(drain.names_of(plan.build(both), [h for h in both.hosts if h.name == "b"]))
    inv = load_inventory(_inventory(tmp_path, "[{name: a, address: 10.0.0.1}]"))
    gone = [Host(name="b", address="10.0.0.2")]
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uninstall, "departed", lambda _inv: gone)
    monkeypatch.setattr(drain, "set_drained", lambda i, names, hosts=None: seen.update(drained=(i, names)))
    monkeypatch.setattr(drain, "wait_idle", lambda i, names, timeout_s: seen.update(idle=names))

    def fake_uninstall(old: Any, hosts: list[Host], run_dir: Path, on_task: Any) -> PlaybookResult:
        seen["removed"] = [h.name for h in hosts]
        return PlaybookResult(status="successful", rc=0, hosts={"b": HostResult(host="b")}, artifacts=run_dir)

    monkeypatch.setattr(uninstall, "uninstall", fake_uninstall)
    monkeypatch.setattr(uninstall.revisions, "forget_hosts", lambda d, names: seen.update(forgot=names))

    result = uninstall.prune(inv, tmp_path / "run", lambda _m: None, lambda *_a: None)

    assert result is not None and result.success
    drained_on, names = seen["drained"]
    assert [h.name for h in drained_on.hosts] == ["a"]  # told on the gateway that stays
    assert set(names) == deployed and names  # by the names b's engines had
    assert seen["idle"] == names and seen["removed"] == ["b"] and seen["forgot"] == ["b"]
