"""The scrape token Prometheus shows the gateways for their metrics (service/scrape_auth.py),
kept on the control machine.

Generated once (0600 under the state directory); the serving hosts' gateways and the monitoring
hosts' Prometheus get it in 0640 files written by no_log tasks, read by Ansible with a file
lookup so it never lands in the run directory.
"""

import secrets
from pathlib import Path

from installer.files import write_private
from installer.paths import state_dir

TOKEN_FOLDER = "metrics"  # under the state folder


def token_file(deployment: str) -> Path:
    return state_dir() / TOKEN_FOLDER / f"{deployment}.token"


def ensure_token(deployment: str) -> Path:
    path = token_file(deployment)
    if not path.is_file():
        write_private(path, secrets.token_hex(32))
    return path
