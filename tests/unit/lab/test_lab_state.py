"""lab.json round-trip and where a lab keeps its files."""

import json
from pathlib import Path

import pytest

from installer.base.errors import LabError
from installer.lab import state
from installer.lab.state import HostRecord, LabState


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / ".installer"))
    return tmp_path / ".installer"


def _sample() -> LabState:
    return LabState(
        name="lab",
        subnet="10.213.0.0/24",
        control_address="10.213.0.1",
        bridge="plb-lab",
        hosts=[
            HostRecord("lab1", "10.213.0.11", "pli-lab-1", "plv-lab-1", "/r/1", "/l/1", pid=4242),
            HostRecord("lab2", "10.213.0.12", "pli-lab-2", "plv-lab-2", "/r/2", "/l/2", release="debian-13"),
        ],
    )


def test_round_trip(_state_dir: Path) -> None:
    original = _sample()
    state.save(original)
    assert state.state_path("lab") == _state_dir / "lab" / "lab" / "lab.json"
    assert state.load("lab") == original
    assert not list(state.lab_dir("lab").glob("*.tmp")), "the temp file must be renamed away"


def test_state_from_before_releases_reads_as_debian_12(_state_dir: Path) -> None:
    data = json.loads(_sample().to_json())
    for host in data["hosts"]:
        del host["release"]
    state.state_path("lab").parent.mkdir(parents=True)
    state.state_path("lab").write_text(json.dumps(data))
    loaded = state.load("lab")
    assert loaded is not None and [h.release for h in loaded.hosts] == ["debian-12", "debian-12"]
    assert [h.release for h in _sample().hosts] == ["debian-12", "debian-13"]


def test_missing_state_is_none_and_remove_is_idempotent() -> None:
    assert state.load("lab") is None
    state.remove("lab")
    state.save(_sample())
    state.remove("lab")
    assert state.load("lab") is None


def test_unreadable_state_points_at_down(_state_dir: Path) -> None:
    path = state.state_path("lab")
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 99}')
    with pytest.raises(LabError, match="cannot read lab state") as err:
        state.load("lab")
    assert "installer lab down" in err.value.details[0]


def test_paths_are_absolute_and_the_model_is_shared(_state_dir: Path) -> None:
    assert state.ssh_dir("lab") == _state_dir / "lab" / "lab" / "ssh"
    assert state.hosts_dir("ci") == _state_dir / "lab" / "ci" / "hosts"
    assert state.model_dir() == _state_dir / "lab" / "model" / "tiny-llama"
    assert state.model_dir().is_absolute()


def test_lock_refuses_a_second_holder() -> None:
    with (
        state.locked("lab"),
        pytest.raises(LabError, match="another `installer lab` command"),
        state.locked("lab"),
    ):
        pass
    with state.locked("lab"):  # released again
        pass
