"""What `installer usage` reads: the program it runs on a host (service.usage_report), run here
with a test gateway's config."""

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from installer.flows.usage import Report
from tests.support import REPO


def usage_report(config: Path) -> Report:
    today = datetime.now(UTC).date().isoformat()
    proc = subprocess.run(
        [sys.executable, "-m", "service.usage_report", "--since", today],
        cwd=REPO, env={**os.environ, "PLI_GATEWAY_CONFIG": str(config)},
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return Report("here", data["days"], data["quotas"])
