"""Pure helpers of the lab: /proc and `ip` output parsing, command lines, cache keys, files."""

from pathlib import Path

import pytest

from installer.base.errors import LabError
from installer.hosts.ssh import known_hosts_option
from installer.hosts.sshkeys import known_hosts_lines
from installer.lab import hosts, network, processes, rootfs, sshkeys

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:5 / /w/.installer/lab/lab/hosts/lab1/rootfs/proc rw shared:2 - proc proc rw
91 90 0:6 / /w/.installer/lab/lab/hosts/lab1/rootfs/proc/sys rw shared:3 - sysfs sys rw
92 22 0:7 / /w/my\\040dir/x rw shared:4 - tmpfs tmpfs rw
93 22 0:8 / /w/.installer/lab/lab2/hosts/lab21/rootfs/proc rw shared:5 - proc proc rw
"""


def test_mount_points_unescape_octal() -> None:
    points = processes.parse_mount_points(MOUNTINFO)
    assert "/w/my dir/x" in points
    assert len(points) == 5


def test_mounts_under_is_deepest_first_and_stays_in_its_directory(monkeypatch, tmp_path) -> None:
    fake_proc = tmp_path / "proc"
    (fake_proc / "self").mkdir(parents=True)
    (fake_proc / "self" / "mountinfo").write_text(MOUNTINFO)
    monkeypatch.setattr(processes, "_PROC", fake_proc)
    assert processes.mounts_under(Path("/w/.installer/lab/lab")) == [
        "/w/.installer/lab/lab/hosts/lab1/rootfs/proc/sys",
        "/w/.installer/lab/lab/hosts/lab1/rootfs/proc",
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["/usr/bin/systemd-nspawn", "-b", "-D", "/r/lab1/rootfs", "--machine=lab1"],
            "/r/lab1/rootfs",
        ),
        (["systemd-nspawn", "--directory=/r/x"], "/r/x"),
        (["systemd-nspawn", "--directory", "/r/y"], "/r/y"),
        (["systemd-nspawn", "-b"], None),
        (["/usr/bin/python3", "-D", "/r/lab1/rootfs"], None),
        ([], None),
    ],
)
def test_nspawn_rootfs(argv: list[str], expected: str | None) -> None:
    assert processes.nspawn_rootfs(argv) == expected


def test_nspawn_command_line_has_the_flags_this_machine_needs() -> None:
    argv = hosts.nspawn_argv(Path("/r/lab1/rootfs"), "lab1", "pli-lab-1")
    for flag in (
        "-b",
        "--register=no",
        "--keep-unit",
        "--network-namespace-path=/run/netns/pli-lab-1",
        "--capability=CAP_NET_ADMIN",  # keepalived adds the frontend's VIP (#37)
    ):
        assert flag in argv
    assert processes.nspawn_rootfs(argv) == "/r/lab1/rootfs", (
        "down must recognise what boot started"
    )


def test_netns_list_parsing() -> None:
    text = "pli-lab-2 (id: 1)\npli-lab-1 (id: 0)\nother\n\n"
    assert network.parse_netns_list(text) == ["pli-lab-2", "pli-lab-1", "other"]


def test_known_hosts_lines_drop_comments() -> None:
    lines = known_hosts_lines(
        {
            "10.213.0.11": [
                "ssh-ed25519 AAAAC3Nz root@build",
                "ecdsa-sha2-nistp256 AAAAE2 root@build",
            ]
        }
    )
    assert lines == ["10.213.0.11 ssh-ed25519 AAAAC3Nz", "10.213.0.11 ecdsa-sha2-nistp256 AAAAE2"]


def test_ssh_always_checks_host_keys() -> None:
    argv = sshkeys.ssh_argv(Path("/k"), Path("/kh"), "10.213.0.11", "true")
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined and known_hosts_option(Path("/kh")) in argv
    assert "StrictHostKeyChecking=no" not in joined
    assert argv[:3] == ["ssh", "-F", "none"] and "GlobalKnownHostsFile=/dev/null" in argv
    assert argv[-5:] == ["-l", "root", "--", "10.213.0.11", "true"]


def test_cache_key_changes_with_every_input() -> None:
    base = ("bookworm", "minbase", rootfs.INCLUDE, rootfs.DEFAULT_MIRROR, "amd64")
    key = rootfs.cache_key(*base)
    assert key == rootfs.cache_key(*base), "stable"
    variants = [
        ("trixie", *base[1:]),
        (base[0], "buildd", *base[2:]),
        (*base[:2], (*rootfs.INCLUDE, "libnuma1"), *base[3:]),
        (*base[:3], "http://mirror.example/debian", base[4]),
        (*base[:4], "arm64"),
    ]
    assert len({key, *(rootfs.cache_key(*v) for v in variants)}) == 6


def test_the_image_does_not_hide_what_real_minimal_hosts_lack() -> None:
    # The bundle must ship libnuma1 and the engine must not need a compiler: keep them out.
    assert not {"libnuma1", "g++", "gcc", "build-essential"} & set(rootfs.INCLUDE)


def test_mirror_is_overridable(monkeypatch) -> None:
    monkeypatch.delenv("INSTALLER_DEBIAN_MIRROR", raising=False)
    assert rootfs.mirror() == "http://deb.debian.org/debian"
    monkeypatch.setenv("INSTALLER_DEBIAN_MIRROR", "http://local/debian")
    assert rootfs.mirror() == "http://local/debian"
    assert rootfs.debootstrap_argv(Path("/t"), rootfs.mirror(), "amd64")[-3:] == [
        "bookworm", "/t", "http://local/debian",
    ]  # fmt: skip
    assert rootfs.debootstrap_argv(Path("/t"), rootfs.mirror(), "amd64", "trixie")[-3:] == [
        "trixie", "/t", "http://local/debian",
    ]  # fmt: skip


def test_lab_releases_are_the_debian_targets() -> None:
    assert rootfs.RELEASES == {"debian-12": "bookworm", "debian-13": "trixie"}
    assert rootfs.suite("debian-13") == "trixie"
    with pytest.raises(LabError, match=r"cannot run 'ubuntu-24.04'.*use one of debian-12, debian-13"):
        rootfs.suite("ubuntu-24.04")


def test_each_release_has_its_own_cached_base(monkeypatch) -> None:
    monkeypatch.setattr(rootfs, "architecture", lambda: "amd64")
    bookworm, trixie = rootfs.cached_base("debian-12"), rootfs.cached_base("debian-13")
    assert bookworm != trixie and bookworm == rootfs.cached_base()
    assert trixie.parent.name == rootfs.cache_key("trixie", rootfs.VARIANT, rootfs.INCLUDE, rootfs.mirror(), "amd64")


def test_host_releases_one_for_all_or_one_per_host() -> None:
    assert rootfs.host_releases(["debian-13"], 3) == ["debian-13"] * 3
    assert rootfs.host_releases(["debian-12", "debian-13"], 2) == ["debian-12", "debian-13"]
    with pytest.raises(LabError, match=r"names 2 releases for 3 hosts: give one release for all hosts"):
        rootfs.host_releases(["debian-12", "debian-13"], 3)
    with pytest.raises(LabError, match=r"cannot run 'debian-11'"):
        rootfs.host_releases(["debian-12", "debian-11"], 2)


def test_hosts_file_names_every_lab_host() -> None:
    text = rootfs.hosts_file([("lab1", "10.213.0.11"), ("lab2", "10.213.0.12")])
    assert "127.0.0.1\tlocalhost" in text
    assert text.endswith("10.213.0.11\tlab1\n10.213.0.12\tlab2\n")


def test_console_tail_strips_colour_codes(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text("\x1b[0;1;31mFailed to start x\x1b[0m\r\n\nok\n")
    assert hosts.console_tail(log) == ["console: Failed to start x", "console: ok"]
    assert hosts.console_tail(tmp_path / "missing.log") == []


def _fake_process(proc: Path, pid: int, argv: list[str], state: str = "S") -> Path:
    d = proc / str(pid)
    (d / "ns").mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "stat").write_text(f"{pid} ({Path(argv[0]).name}) {state} 1 1 1")
    (d / "ns" / "net").write_text("")
    return d / "ns" / "net"


def test_the_process_scans_read_every_pid_and_only_pids(monkeypatch, tmp_path) -> None:
    # Pids far above any real one: is_running reaps only its own children, and these are none.
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)  # /proc's other entries are not processes
    netns = _fake_process(proc, 4_000_001, ["/usr/bin/systemd-nspawn", "-D", "/w/lab/hosts/h1/rootfs"])
    _fake_process(proc, 4_000_002, ["cp", "-a", "/src", "/w/lab/hosts/h2/rootfs"], "R")
    _fake_process(proc, 4_000_003, ["cp", "-a", "/src", "/w/lab/hosts/h3/rootfs"], "Z")  # exited
    _fake_process(proc, 4_000_004, ["cp", "-a", "/src", "/elsewhere"])
    monkeypatch.setattr(processes, "_PROC", proc)
    lab = Path("/w/lab")
    assert processes.nspawns_under(lab) == [processes.NspawnProcess(4_000_001, "/w/lab/hosts/h1/rootfs")]
    assert processes.tool_processes_under(lab, ("cp",)) == [
        (4_000_002, ["cp", "-a", "/src", "/w/lab/hosts/h2/rootfs"])
    ]
    assert processes.pids_in_netns(netns) == [4_000_001]
