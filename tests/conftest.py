"""What every test run shares: its own audit key (installer/state/audit.py).

The installer keeps the audit key and the trails' checkpoints outside the state folder, by
default in /var/lib/private-llm-installer/audit/ for root. A test run makes hundreds of state
folders under pytest's temporary directory, whose paths come back in later runs: with the
machine's own key, a later run's fresh folder could meet an earlier run's checkpoint and be
refused as a deleted trail. So each run (each pytest process, fixtures and subprocesses
included) seals its trails with a key of its own, in a 0700 folder made for it.
"""

import os
import shutil
import tempfile

import pytest

_made: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if "PLI_AUDIT_KEY_FILE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="pli-audit-")  # 0700
        _made.append(folder)
        os.environ["PLI_AUDIT_KEY_FILE"] = os.path.join(folder, "key")
    os.environ.setdefault("PLI_AUDIT_SYSLOG", "0")  # the host's syslog is not the tests'


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)
