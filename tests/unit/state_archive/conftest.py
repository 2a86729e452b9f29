"""Two machines' worth of control state in one test: the old machine's state folder and audit
key, and the new machine's, each its own folder (INSTALLER_STATE_DIR, PLI_AUDIT_KEY_FILE)."""

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyrage
import pytest
from typer.testing import CliRunner, Result

from installer import audit, keys, paths
from installer.cli import _register, app

_register()


@dataclass
class Machine:
    state: Path
    audit_key: Path

    def env(self) -> dict[str, str]:
        return {
            "INSTALLER_STATE_DIR": str(self.state),
            "PLI_AUDIT_KEY_FILE": str(self.audit_key),
            "PLI_AUDIT_SYSLOG": "0",
        }


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for folder in path.parents:  # 0700, as the installer's writers make them (mkdir's mode meets the umask)
        if folder.name == ".installer":
            break
        folder.chmod(0o700)
    path.write_bytes(data)
    path.chmod(mode)


@pytest.fixture
def on(monkeypatch: pytest.MonkeyPatch) -> Callable[["Machine"], None]:
    """Make `machine` the one the next command runs on."""

    def switch(machine: Machine) -> None:
        for name, value in machine.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("PLI_STATE_PASSPHRASE", raising=False)
        paths.use_state_dir(None)

    return switch


@pytest.fixture
def old(tmp_path: Path, on: Callable[[Machine], None]) -> Machine:
    """A state folder as `up` on a cloud deployment leaves it: keys made by the key store, a trail
    sealed by the audit module, and the other entries with the modes their writers give them."""
    m = Machine(tmp_path / "old" / ".installer", tmp_path / "old-audit" / "audit" / "key")
    on(m)
    paths.state_dir()
    keys.create("alice")
    audit.append(audit.new_entry("up", ["up", "-i", "site.yml"], None, None))
    s = m.state
    _write(s / "probe-key", b"sk-pli-probe-secret\n", 0o600)
    _write(s / "tls" / "prod" / "ca.key", b"-----BEGIN PRIVATE KEY-----\nca\n", 0o600)
    _write(s / "tls" / "prod" / "ca.pem", b"-----BEGIN CERTIFICATE-----\nca\n", 0o644)
    _write(s / "redis" / "prod.password", os.urandom(32).hex().encode(), 0o600)
    _write(s / "metrics" / "prod.token", os.urandom(32).hex().encode(), 0o600)
    _write(s / "state.json", b'{"deployments": {"prod": {"revisions": [1]}}}\n', 0o600)
    _write(s / "revisions" / "prod" / "1" / "inventory.yml", b"deployment: prod\n", 0o600)
    _write(s / "terraform" / "prod" / "terraform.tfstate", b'{"version": 4}\n', 0o600)
    _write(s / "terraform" / "prod" / ".terraform" / "providers" / "aws", b"plugin bytes", 0o755)
    _write(s / "keys" / "site.key", b"signing key\n", 0o600)
    _write(s / "keys" / "site.pub", b"signing pub\n", 0o644)
    _write(s / "runs" / "20261206-000000-up-prod" / "installer.log", b"log\n", 0o600)
    _write(s / "converged" / "prod.json", b"{}\n", 0o600)
    _write(s / "state.lock", b"", 0o600)
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


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under `root`: its mode and, for a file, its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = (p.lstat().st_mode & 0o7777, None if p.is_dir() else p.read_bytes())
    return out
