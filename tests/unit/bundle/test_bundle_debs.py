"""OS package download: apt is confined to a private tree aimed at the target release in its
distribution's own archive."""

import hashlib
import json
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle.debs import (
    ARCHIVES,
    DEBIAN,
    DEFAULT_MIRROR,
    _prepare_tree,
    apt_options,
    download_debs,
    request_key,
)

UBUNTU = ARCHIVES["ubuntu"]


def test_apt_options_point_every_state_dir_into_the_private_tree(tmp_path: Path) -> None:
    argv = apt_options(tmp_path, "amd64")
    options = dict(a.split("=", 1) for a in argv if a != "-o")
    for name in (
        "Dir::Etc::SourceList",
        "Dir::Etc::SourceParts",
        "Dir::State::Lists",
        "Dir::State::status",
        "Dir::Cache",
        "Dir::Etc::PreferencesParts",
    ):
        assert options[name].startswith(str(tmp_path)), name
    assert options["APT::Architecture"] == "amd64"


def test_sources_list_names_target_suite_mirror_and_keyring(tmp_path: Path) -> None:
    keyring = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
    _prepare_tree(
        tmp_path, suite="bookworm", mirror="http://m.lan/debian/", keyring=keyring, arch="amd64"
    )
    assert (tmp_path / "sources.list").read_text() == (
        f"deb [arch=amd64 signed-by={keyring}] http://m.lan/debian bookworm main\n"
    )
    assert (tmp_path / "status").read_text() == ""  # nothing counts as installed


def test_ubuntu_sources_name_every_pocket_and_universe(tmp_path: Path) -> None:
    keyring = Path("/usr/share/keyrings/ubuntu-archive-keyring.gpg")
    _prepare_tree(
        tmp_path, suite="noble", mirror="http://m.lan/ubuntu/", keyring=keyring, arch="amd64", archive=UBUNTU
    )
    # one line per suite: a one-line source names one suite, the words after it are components
    assert (tmp_path / "sources.list").read_text().splitlines() == [
        f"deb [arch=amd64 signed-by={keyring}] http://m.lan/ubuntu {suite} main universe"
        for suite in ("noble", "noble-updates", "noble-security")
    ]


@pytest.mark.parametrize(
    ("archive", "env", "default"),
    [(DEBIAN, "INSTALLER_DEBIAN_MIRROR", DEFAULT_MIRROR), (UBUNTU, "INSTALLER_UBUNTU_MIRROR", "http://archive.ubuntu.com/ubuntu")],
)
def test_mirror_and_keyring_from_env(archive, env: str, default: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env, raising=False)
    assert archive.mirror() == default
    monkeypatch.setenv(env, "http://mirror.lan/x")
    assert archive.mirror() == "http://mirror.lan/x"
    monkeypatch.setenv(archive.keyring_env, "/srv/keys.gpg")
    assert archive.keyring() == Path("/srv/keys.gpg")


def test_cache_key() -> None:
    base = request_key(
        ["libnuma1", "numactl"], suite="bookworm", mirror=DEFAULT_MIRROR, arch="amd64"
    )
    assert base == request_key(
        ["numactl", "libnuma1"], suite="bookworm", mirror=DEFAULT_MIRROR + "/", arch="amd64"
    )
    assert base != request_key(["libnuma1"], suite="bookworm", mirror=DEFAULT_MIRROR, arch="amd64")
    assert base != request_key(
        ["libnuma1", "numactl"], suite="trixie", mirror=DEFAULT_MIRROR, arch="amd64"
    )
    # Debian's keys keep their shape from before Ubuntu's archive; format 2 (MINBASE, #37): an entry
    # resolved against the old minimal system (perl counted as present) is not found again
    shape = {"packages": ["libnuma1", "numactl"], "suite": "bookworm", "mirror": DEFAULT_MIRROR, "arch": "amd64"}
    key = lambda fmt: hashlib.sha256(json.dumps({"format": fmt, **shape}, sort_keys=True).encode()).hexdigest()  # noqa: E731
    assert base == key(2) and base != key(1)
    # Ubuntu's request names its pockets and components too
    noble = request_key(["redis-server"], suite="noble", mirror="http://m.lan/ubuntu", arch="amd64", archive=UBUNTU)
    assert noble != request_key(["redis-server"], suite="noble", mirror="http://m.lan/ubuntu", arch="amd64")


def test_a_missing_ubuntu_keyring_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("INSTALLER_UBUNTU_KEYRING", str(tmp_path / "none.gpg"))
    with pytest.raises(BundleError) as err:  # before apt runs: nothing is fetched unchecked
        download_debs(["redis-server"], suite="noble", archive=UBUNTU)
    assert err.value.args[0] == f"the ubuntu archive keyring {tmp_path / 'none.gpg'} is missing"
    assert "apt-get install ubuntu-keyring" in err.value.details[0]
    assert "INSTALLER_UBUNTU_KEYRING" in err.value.details[0]


@pytest.mark.parametrize("packages", [[], ["Bad Name"], ["libnuma1; rm -rf /"]])
def test_invalid_package_names_are_refused_before_apt_runs(
    packages: list[str], tmp_path: Path
) -> None:
    with pytest.raises(BundleError, match="invalid Debian package names"):
        download_debs(packages, tmp_path)
