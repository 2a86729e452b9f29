"""Where the installer keeps its files on the control machine.

A deployment's state (keys, CA, revisions, runs, Terraform state) lives in `.installer/` next
to the inventory that describes it, so every command given the same inventory finds the same
state from any working directory. One resolver decides, most explicit first:
`--state-dir` > INSTALLER_STATE_DIR > the command's inventory's folder > ./.installer (the lab,
and commands given no inventory). Caches (rootfs, bundles, wheels) are shared per
user under XDG_CACHE_HOME because they are large and content-addressed.
"""

import os
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from installer.base.errors import InstallerError

# installer/, two folders up from installer/base/paths.py
_PACKAGE = Path(__file__).resolve().parents[1]


def _checkout() -> Path | None:
    root = _PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "playbooks" / "site.yml").is_file() else None


# The source tree this code runs from (an editable install, the tests), or None for an installed
# wheel. A checkout reads its own playbooks and Terraform modules, so edits take effect; a wheel
# carries copies of them in installer/_data (see pyproject.toml).
CHECKOUT = _checkout()
PLAYBOOKS_DIR = CHECKOUT / "playbooks" if CHECKOUT else _PACKAGE / "_data" / "playbooks"
TERRAFORM_MODULES_DIR = CHECKOUT / "terraform" / "modules" if CHECKOUT else _PACKAGE / "_data" / "terraform"


STATE_DIR_NAME = ".installer"


@dataclass
class _StateChoice:
    explicit: Path | None = None  # --state-dir
    inventory: Path | None = None  # the command's inventory file


_choice = _StateChoice()


def use_state_dir(explicit: Path | None) -> None:
    """The CLI's entry point: forget any earlier command's choice, take --state-dir (or None)."""
    _choice.explicit = Path(explicit).resolve() if explicit else None
    _choice.inventory = None


def anchor_state_to(inventory: Path) -> None:
    """State goes next to this inventory file (unless --state-dir or the environment say otherwise)."""
    _choice.inventory = Path(os.path.abspath(inventory))


def resolve_state_dir() -> tuple[Path, str]:
    """(the state directory, what chose it: for messages that must say where state was looked for)."""
    if _choice.explicit is not None:
        return _choice.explicit, "--state-dir"
    if os.environ.get("INSTALLER_STATE_DIR"):
        return Path(os.environ["INSTALLER_STATE_DIR"]).resolve(), "INSTALLER_STATE_DIR"
    if _choice.inventory is not None:
        return _choice.inventory.parent / STATE_DIR_NAME, f"the folder of {_choice.inventory.name}"
    return Path(STATE_DIR_NAME).resolve(), "the working directory"


def state_dir() -> Path:
    path, _why = resolve_state_dir()
    if not path.is_dir():
        # Keys, the CA and Redis passwords live here: only this user may read it. A write into a
        # folder we may not create fails later with the real error, so it is not raised here.
        with suppress(OSError):
            path.mkdir(mode=0o700, parents=True)
    return path


def private_dir(path: Path) -> Path:
    """Make `path` (and keep it) readable by this user only: run folders hold inventories and logs."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        folder, why = resolve_state_dir()
        raise InstallerError(
            f"cannot make {path} (state folder {folder}, chosen by {why}): {exc.strerror or exc}",
            ["pass `installer --state-dir DIR ...` with a folder you may write to"],
        ) from exc
    return path


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("INSTALLER_CACHE_DIR", Path(base) / "private-llm-installer"))


def control_socket_dir() -> str:
    """Ansible's SSH control sockets: a short path (UNIX socket names are limited to 108 bytes),
    per user. The air-gap control namespace hides exactly this directory (lab/control_ns.py)."""
    return f"/tmp/pli-cp-{os.getuid()}"


@cache
def role_defaults(role: str) -> dict[str, Any]:
    """A role's defaults/main.yml: where the control machine reads a value the role owns (one
    source of truth for both)."""
    return yaml.safe_load((PLAYBOOKS_DIR / "roles" / role / "defaults" / "main.yml").read_text()) or {}
