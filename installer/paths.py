"""Where the installer keeps its files on the control machine.

State (runs, lab, keys) lives in `.installer/` under the working directory so a deployment's
files travel with the project that describes it; caches (rootfs, bundles, wheels) are shared
per user under XDG_CACHE_HOME because they are large and content-addressed.
"""

import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
PLAYBOOKS_DIR = REPO_ROOT / "playbooks"


def state_dir() -> Path:
    return Path(os.environ.get("INSTALLER_STATE_DIR", ".installer")).resolve()


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
