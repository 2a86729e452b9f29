"""The bundle's apt repository: the index written in Python is what dpkg-scanpackages writes, and
apt, confined to a private configuration, installs from it (no network, no system sources)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from installer.base.errors import BundleError
from installer.bundle import aptrepo
from installer.bundle.debs import apt_options

needs_dpkg_deb = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

CONTROL = """\
Package: {name}
Version: {version}
Architecture: all
Maintainer: Test <t@example.com>
{depends}Description: demo package {name}
 A longer description
 .
 with an empty line.
"""


def make_deb(
    dest: Path, name: str, version: str, depends: str = "", compression: str = "xz"
) -> Path:
    pkg = dest / f"src-{name}"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr/share/doc" / name).mkdir(parents=True)
    (pkg / "usr/share/doc" / name / "README").write_text(f"{name}\n")
    (pkg / "DEBIAN/control").write_text(
        CONTROL.format(
            name=name, version=version, depends=f"Depends: {depends}\n" if depends else ""
        )
    )
    deb = dest / f"{name}_{version.replace(':', '%3a')}_all.deb"
    subprocess.run(
        ["dpkg-deb", f"-Z{compression}", "--root-owner-group", "-b", str(pkg), str(deb)],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(pkg)
    return deb


@needs_dpkg_deb
@pytest.mark.parametrize("compression", ["xz", "gzip", "none", "zstd"])
def test_control_is_read_whatever_the_compression(tmp_path: Path, compression: str) -> None:
    deb = make_deb(tmp_path, "pli-demo", "1:2.0-1", "pli-dep (>= 1.0)", compression)
    fields = dict(aptrepo.parse_paragraph(aptrepo.control_text(deb)))
    assert fields["Package"] == "pli-demo"
    assert fields["Version"] == "1:2.0-1"
    assert fields["Depends"] == "pli-dep (>= 1.0)"
    assert fields["Description"].endswith("\n .\n with an empty line.")


def test_a_file_that_is_not_a_deb_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "x.deb"
    bad.write_bytes(b"<html>not found</html>")
    with pytest.raises(BundleError, match=r"x\.deb is not a Debian package"):
        aptrepo.control_text(bad)


@needs_dpkg_deb
@pytest.mark.skipif(shutil.which("dpkg-scanpackages") is None, reason="needs dpkg-dev")
def test_index_matches_dpkg_scanpackages(tmp_path: Path) -> None:
    make_deb(tmp_path, "pli-demo", "1:2.0-1", "pli-dep (>= 1.0)")
    make_deb(tmp_path, "pli-dep", "1.5")
    ours = aptrepo.write_index(tmp_path)
    theirs = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sorted(ours, key=lambda p: p["Package"]) == sorted(
        aptrepo.parse_index(theirs), key=lambda p: p["Package"]
    )


@needs_dpkg_deb
def test_index_is_deterministic(tmp_path: Path) -> None:
    make_deb(tmp_path, "pli-demo", "2.0")
    aptrepo.write_index(tmp_path)
    first = [(tmp_path / n).read_bytes() for n in (aptrepo.PACKAGES, aptrepo.RELEASE)]
    aptrepo.write_index(tmp_path)
    assert first == [(tmp_path / n).read_bytes() for n in (aptrepo.PACKAGES, aptrepo.RELEASE)]


@needs_dpkg_deb
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_apt_resolves_from_the_repository_alone(tmp_path: Path) -> None:
    repo = tmp_path / "bundle" / "debs"
    repo.mkdir(parents=True)
    make_deb(repo, "pli-demo", "1:2.0-1", "pli-dep (>= 1.0)")
    make_deb(repo, "pli-dep", "1.5")
    aptrepo.write_index(repo)
    apt_root = tmp_path / "apt"
    for sub in ("sources.list.d", "preferences.d", "lists/partial", "cache/archives/partial"):
        (apt_root / sub).mkdir(parents=True)
    (apt_root / "status").write_text("")  # an empty system: every dependency must come from us
    (apt_root / "sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    opts = apt_options(apt_root, "amd64")
    update = subprocess.run(["apt-get", *opts, "-q", "update"], capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "Err:" not in update.stdout and "W:" not in update.stderr, update.stderr
    sim = subprocess.run(
        ["apt-get", *opts, "-s", "-q", "--no-install-recommends", "install", "pli-demo=1:2.0-1"],
        capture_output=True,
        text=True,
    )
    assert sim.returncode == 0, sim.stdout + sim.stderr
    installs = [line.split()[1] for line in sim.stdout.splitlines() if line.startswith("Inst ")]
    assert installs == ["pli-dep", "pli-demo"]  # the dependency first: apt orders the install
