"""An installer-like parent for tests: runs one playbook through installer.ansible.runner, as
`installer up` does, and exits 0 when it succeeded.

    python -m tests.support.ansible_parent PLAYBOOKS_DIR INVENTORY_DIR RUN_DIR PLAYBOOK
"""

import sys
from pathlib import Path

from installer.ansible.runner import run_playbook


def main(argv: list[str]) -> int:
    playbooks, inventory, run_dir, playbook = argv
    result = run_playbook(playbook, Path(inventory), Path(run_dir), playbooks_dir=Path(playbooks))
    print(f"{result.status} {result.rc}", flush=True)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
