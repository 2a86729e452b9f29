"""`lab up`/`down` refuse clearly, before touching anything, when they cannot work."""

import shutil
from pathlib import Path

import pytest

from installer import lab
from installer.base.errors import LabError
from installer.lab import lifecycle, rootfs


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(rootfs, "architecture", lambda: "amd64")


def _as_uid(monkeypatch: pytest.MonkeyPatch, uid: int) -> None:
    monkeypatch.setattr(lifecycle.os, "geteuid", lambda: uid)


def test_up_needs_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _as_uid(monkeypatch, 1000)
    with pytest.raises(LabError, match=r"needs root.*sudo"):
        lab.up(1)
    assert not (tmp_path / "state").exists(), "nothing may be created before the checks"


def test_down_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_uid(monkeypatch, 1000)
    with pytest.raises(LabError, match="needs root"):
        lab.down()


def test_bad_input_is_reported_before_privileges(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_uid(monkeypatch, 1000)
    with pytest.raises(LabError, match="invalid lab name"):
        lab.up(1, name="Bad-Name")
    with pytest.raises(LabError, match="--hosts must be between 1 and 244"):
        lab.up(0)


def test_missing_debootstrap_names_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _as_uid(monkeypatch, 0)
    real_which = shutil.which
    monkeypatch.setattr(
        lifecycle.shutil, "which", lambda t: None if t == "debootstrap" else real_which(t) or t
    )
    with pytest.raises(LabError, match=r"apt-get install -y debootstrap"):
        lab.up(1)
    assert not (tmp_path / "state").exists()


def test_missing_nspawn_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_uid(monkeypatch, 0)
    monkeypatch.setattr(lifecycle.shutil, "which", lambda t: None if t == "systemd-nspawn" else t)
    with pytest.raises(LabError, match="systemd-container"):
        lab.up(1)


def _bridge_of(monkeypatch: pytest.MonkeyPatch, owner: Path, pids: list[int]) -> list[Path]:
    """`down --name ci` as root, with bridge plb-ci owned by `owner` and `pids` in its namespace."""
    from installer.lab import network, processes

    _as_uid(monkeypatch, 0)
    monkeypatch.setattr(lifecycle.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(network, "bridge_owner", lambda bridge: str(owner))
    monkeypatch.setattr(network, "lab_netns", lambda name: ["pli-ci-1"])
    monkeypatch.setattr(processes, "pids_in_netns", lambda path: pids)
    deleted: list[Path] = []
    monkeypatch.setattr(network, "delete_netns", lambda ns: deleted.append(Path(ns)))
    return deleted


def test_down_leaves_a_lab_of_another_project_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    deleted = _bridge_of(monkeypatch, tmp_path, pids=[])  # its folder exists: someone else's lab
    with pytest.raises(LabError, match=rf"belongs to the lab whose state is in {tmp_path}.*nothing was changed"):
        lab.down("ci")
    assert deleted == []


def test_down_leaves_a_running_lab_alone_even_if_its_folder_is_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deleted = _bridge_of(monkeypatch, tmp_path / "gone", pids=[4242])
    with pytest.raises(LabError, match=r"belongs to the lab"):
        lab.down("ci")
    assert deleted == []


def test_orphaned_lab_is_recognised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A CI run in a container that shares this machine's network left plb-ci and its namespaces
    # behind, owned by a folder that no longer exists here and running nothing.
    _bridge_of(monkeypatch, tmp_path / "gone", pids=[])
    assert lifecycle._orphaned("ci", tmp_path / "gone")
    assert not lifecycle._orphaned("ci", tmp_path)
