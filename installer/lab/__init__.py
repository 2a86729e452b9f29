"""The lab: real Debian 12 hosts on this machine, reachable only over SSH, for trying and testing.

Each host is a systemd-nspawn container with systemd as PID 1, in its own network namespace
behind a bridge, with no route anywhere but the control machine -- an air-gapped server in
miniature. `up` writes an inventory the rest of the product uses like any other.

    from installer import lab
    info = lab.up(2)            # boots lab1, lab2; writes inventory/lab.yml
    lab.status()                # one HostStatus per host
    lab.down()                  # clean shutdown, then removes everything but keys and logs
    assert lab.leftovers() == []
"""

from installer.lab.lifecycle import (
    DEFAULT_NAME,
    DEFAULT_SUBNET,
    DownTimes,
    HostStatus,
    LabHost,
    LabInfo,
    down,
    leftovers,
    status,
    up,
)

__all__ = [
    "DEFAULT_NAME",
    "DEFAULT_SUBNET",
    "DownTimes",
    "HostStatus",
    "LabHost",
    "LabInfo",
    "down",
    "leftovers",
    "status",
    "up",
]
