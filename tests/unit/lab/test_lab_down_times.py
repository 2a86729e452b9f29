"""`lab down` says where its time went: each step, and each host's stop."""

from installer.lab import DownTimes


def test_down_times_name_each_step_and_host() -> None:
    times = DownTimes(
        steps={"prepare": 0.01, "stop hosts": 3.14, "network": 0.2, "remove filesystems": 12.5},
        hosts={"/l/hosts/h32/rootfs": ("powered off", 3.1), "/l/hosts/h31/rootfs": ("terminated", 2.0)},
    )
    assert times.describe() == (
        "prepare 0.0 s; stop hosts 3.1 s (h31 terminated in 2 s, h32 powered off in 3 s); "
        "network 0.2 s; remove filesystems 12.5 s"
    )
