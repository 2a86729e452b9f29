"""The lab itself, on its own: up -> status -> SSH with strict host keys -> isolation -> down.

Its one host runs Debian 13 (trixie), so the trixie image boots here; the shared lab's hosts are
Debian 12 (and whatever PLI_E2E_RELEASES adds).

Uses its own lab name and subnet, so it can run next to the shared `ci` lab and a user's lab.
The tests run in file order; the last one takes the lab down and checks nothing is left.
"""

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer import lab
from installer.base.errors import LabError
from installer.inventory import load_inventory
from installer.lab import state as lab_state

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAME = "lctest"
SUBNET = "10.213.9.0/24"


def _ip_forward() -> str:
    return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()


@pytest.fixture(scope="module")
def forward_before() -> str:
    return _ip_forward()


@pytest.fixture(scope="module")
def info(e2e_state: Path, forward_before: str) -> Iterator[lab.LabInfo]:
    inventory = e2e_state / "lctest.yml"
    yield lab.up(1, name=NAME, subnet=SUBNET, inventory_path=inventory, releases=["debian-13"])
    # Normally a no-op (the last test took it down); after a failure it cleans up.
    lab.down(NAME)


def _ssh(info: lab.LabInfo, command: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={info.known_hosts}", "-o", "IdentitiesOnly=yes",
        "-i", str(info.private_key), f"root@{info.hosts[0].address}", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_up_writes_a_loadable_inventory(info: lab.LabInfo) -> None:
    assert [(h.name, h.address) for h in info.hosts] == [("lctest1", "10.213.9.11")]
    assert info.control_address == "10.213.9.1"
    assert info.private_key.stat().st_mode & 0o077 == 0, "private key must be 0600"
    inv = load_inventory(info.inventory_path)
    assert inv.deployment == NAME
    assert [h.address for h in inv.hosts] == ["10.213.9.11"]
    assert [inv.host_target(h) for h in inv.hosts] == ["debian-13"]
    assert [h.release for h in info.hosts] == ["debian-13"]
    assert inv.ssh.known_hosts == info.known_hosts
    assert (inv.model.path / "config.json").is_file()


def test_status_says_running(info: lab.LabInfo) -> None:
    [host] = lab.status(NAME)
    assert (host.name, host.address) == ("lctest1", "10.213.9.11")
    assert host.alive and host.ssh_ok and host.pid
    assert host.system_state == "running"


def test_ssh_with_strict_host_key_checking(info: lab.LabInfo) -> None:
    result = _ssh(info, "systemctl is-system-running; hostname; . /etc/os-release; echo $VERSION_CODENAME")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["running", "lctest1", "trixie"]


def test_host_has_no_default_route_and_forwarding_is_untouched(
    info: lab.LabInfo, forward_before: str
) -> None:
    routes = subprocess.run(
        ["ip", "-n", info.hosts[0].netns, "route"], capture_output=True, text=True, check=True
    )
    assert "10.213.9.0/24" in routes.stdout
    assert "default" not in routes.stdout
    assert _ip_forward() == forward_before


def test_up_again_returns_the_running_lab_and_refuses_a_different_one(info: lab.LabInfo) -> None:
    [before] = lab.status(NAME)
    again = lab.up(1, name=NAME, subnet=SUBNET, inventory_path=info.inventory_path, releases=["debian-13"])
    assert again.hosts == info.hosts
    [after] = lab.status(NAME)
    assert after.pid == before.pid, "a running lab must be reused, not rebooted"
    with pytest.raises(LabError, match="already exists with 1 hosts"):
        lab.up(2, name=NAME, subnet=SUBNET)
    with pytest.raises(LabError, match="already exists with releases debian-13 \\(asked: debian-12\\)"):
        lab.up(1, name=NAME, subnet=SUBNET)


def test_down_leaves_nothing_behind(info: lab.LabInfo) -> None:
    [host] = lab.status(NAME)
    console_log = lab_state.hosts_dir(NAME) / "lctest1" / "console.log"
    lab.down(NAME)
    assert lab.leftovers(NAME) == []
    assert lab.status(NAME) == []
    assert not Path(f"/proc/{host.pid}").exists()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert "pli-lctest-" not in netns.stdout
    # Stopped by a clean poweroff from inside, not by signals.
    assert "has been shut down" in console_log.read_text()
