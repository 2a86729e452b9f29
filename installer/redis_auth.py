"""The password of the deployment's Redis (shared per-key limits), kept on the control machine.

Generated once (0600 under the state directory); hosts get it inside 0640 config files written
by no_log tasks, read by Ansible with a file lookup so it never lands in the run directory.
"""

import secrets
from pathlib import Path

from installer.files import write_private
from installer.paths import state_dir


def password_file(deployment: str) -> Path:
    return state_dir() / "redis" / f"{deployment}.password"


def ensure_password(deployment: str) -> Path:
    path = password_file(deployment)
    if not path.is_file():
        write_private(path, secrets.token_hex(32))  # hex: safe inside a redis:// URL
    return path
