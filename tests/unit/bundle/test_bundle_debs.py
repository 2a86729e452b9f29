"""Debian package download: apt is confined to a private tree aimed at the target suite."""

from pathlib import Path

import pytest

from installer.bundle.debs import (
    DEFAULT_MIRROR,
    _prepare_tree,
    apt_options,
    debian_mirror,
    download_debs,
    request_key,
)
from installer.errors import BundleError


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


def test_mirror_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INSTALLER_DEBIAN_MIRROR", raising=False)
    assert debian_mirror() == DEFAULT_MIRROR
    monkeypatch.setenv("INSTALLER_DEBIAN_MIRROR", "http://mirror.lan/debian")
    assert debian_mirror() == "http://mirror.lan/debian"


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


@pytest.mark.parametrize("packages", [[], ["Bad Name"], ["libnuma1; rm -rf /"]])
def test_invalid_package_names_are_refused_before_apt_runs(
    packages: list[str], tmp_path: Path
) -> None:
    with pytest.raises(BundleError, match="invalid Debian package names"):
        download_debs(packages, tmp_path)
