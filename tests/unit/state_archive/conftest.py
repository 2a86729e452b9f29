"""The state archive's fixtures: the old machine with a full state folder, a new one with
nothing, a recipient key, and the old machine's state exported to it
(tests/support/state_machines.py has the helpers)."""

from collections.abc import Callable
from pathlib import Path

import pyrage
import pytest

from installer.base import paths
from tests.support.state_machines import Machine, export_to, fill_state


@pytest.fixture
def on(monkeypatch: pytest.MonkeyPatch) -> Callable[[Machine], None]:
    """Make `machine` the one the next command runs on."""

    def switch(machine: Machine) -> None:
        for name, value in machine.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("PLI_STATE_PASSPHRASE", raising=False)
        paths.use_state_dir(None)

    return switch


@pytest.fixture
def old(tmp_path: Path, on: Callable[[Machine], None]) -> Machine:
    m = Machine(tmp_path / "old" / ".installer", tmp_path / "old-audit" / "audit" / "key")
    on(m)
    fill_state(m)
    return m


@pytest.fixture
def new(tmp_path: Path) -> Machine:
    """Another machine: no state folder, no audit key yet."""
    return Machine(tmp_path / "new" / ".installer", tmp_path / "new-audit" / "audit" / "key")


@pytest.fixture(scope="session")
def age_identity(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(a recipient, the identity file that opens what is encrypted to it): recipient keys skip
    scrypt, so most tests run in milliseconds."""
    ident = pyrage.x25519.Identity.generate()
    path = tmp_path_factory.mktemp("age") / "identity.txt"
    path.write_text(str(ident) + "\n")
    path.chmod(0o600)
    return str(ident.to_public()), path


@pytest.fixture
def exported(old: Machine, age_identity: tuple[str, Path], tmp_path: Path) -> Path:
    """The archive of the old machine's state, encrypted to `age_identity`'s recipient; commands
    still run on the old machine until a test switches (`on(new)`)."""
    out = tmp_path / "s.age"
    export_to(out, age_identity[0])
    return out
