"""The end of a deployment's life, run last on the shared lab: `installer up --prune` drains and
removes a host that left the inventory while the other keeps serving; `installer down` removes
private-llm from the rest. Nothing of ours is left on the hosts."""

from pathlib import Path

import pytest
import yaml

from installer.hosts import prove
from installer.inventory import load_inventory
from tests.support.e2e import Run, host_run, installer

pytestmark = pytest.mark.e2e

OURS = (
    "ls -d /opt/private-llm /etc/private-llm /var/lib/private-llm /var/log/private-llm-release "
    "/etc/systemd/system/private-llm-* "
    "2>/dev/null; id private-llm 2>/dev/null; true"
)


_ssh = host_run


def test_prune_then_down_leave_nothing_behind(deployed: Run, lab_hosts, e2e_state: Path, api_key: str) -> None:
    keep, leave = lab_hosts.hosts[0], lab_hosts.hosts[1]
    data = yaml.safe_load(Path(lab_hosts.inventory_path).read_text())
    data["hosts"] = [h for h in data["hosts"] if h["name"] == keep.name]
    # One serving host has nowhere to move a VIP (validate refuses a frontend): the kept host's
    # keepalived lets go of it (#37).
    frontend = data.pop("frontend", None)
    one = e2e_state / "one-host.yml"
    one.write_text(yaml.safe_dump(data, sort_keys=False))

    proc = installer("up", "--inventory", str(one), "--prune")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"pruning {leave.name}" in proc.stdout
    assert _ssh(lab_hosts, leave, OURS).strip() == ""  # the departed host is clean
    assert leave.name not in _ssh(lab_hosts, keep, "cat /etc/private-llm/gateway.yml")
    if frontend is not None:
        let_go = "systemctl is-active keepalived; ls /etc/keepalived/keepalived.conf 2>/dev/null; true"
        assert _ssh(lab_hosts, keep, let_go).split() == ["inactive"]
    inv = load_inventory(one)
    proof = prove.prove(inv, api_key)
    assert [p.ok for p in proof] == [True], proof

    answer_no = installer("down", "--inventory", str(one))  # no terminal: the question is answered no
    assert answer_no.returncode == 1 and _ssh(lab_hosts, keep, OURS).strip() != ""
    proc = installer("down", "--inventory", str(one), "--yes")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "removed" in proc.stdout
    assert _ssh(lab_hosts, keep, OURS).strip() == ""
    assert _ssh(lab_hosts, keep, "ss -Htln 'sport = :8080' | wc -l").strip() == "0"
