"""Two machines' worth of control state for the state archive's tests: each machine a state
folder (INSTALLER_STATE_DIR) and an audit key (PLI_AUDIT_KEY_FILE) of its own, a state folder as
`up` leaves it, the CLI invoked in-process, and a folder read back as paths, modes and bytes."""

import os
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner, Result

from installer.base import paths
from installer.cli import _register, app
from installer.secrets import keys
from installer.state import audit

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


def fill_state(m: Machine) -> None:
    """A state folder as `up` on a cloud deployment leaves it (the machine's environment already
    set): keys made by the key store, a trail sealed by the audit module, and the other entries
    with the modes their writers give them."""
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


def invoke(*args: str) -> Result:
    """The CLI in this process; an InstallerError comes out as itself (the CLI's main() would
    print it as one line)."""
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def export_to(out: Path, recipient: str) -> Result:
    """`installer state export` of this machine's state, encrypted to `recipient`'s key."""
    done = invoke("state", "export", "--out", str(out), "--recipient", recipient)
    assert done.exit_code == 0, done.output
    return done


def import_with(archive: Path, identity: Path, *more: str) -> Result:
    """`installer state import` of `archive` on this machine, opened with `identity`."""
    return invoke("state", "import", str(archive), "--identity", str(identity), *more)


def tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under `root`: its mode and, for a file, its bytes. Lock files are not state:
    made on use by the commands that change it (installer/state/deployment_lock.py), never exported."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for p in sorted(root.rglob("*")):
        if p.suffix == ".lock":
            continue
        out[str(p.relative_to(root))] = (p.lstat().st_mode & 0o7777, None if p.is_dir() else p.read_bytes())
    return out
