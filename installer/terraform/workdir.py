"""Where a deployment's Terraform works: its root module, tfvars, state and the tools it used.

provision.py runs terraform there and mirror.py remembers which terraform and providers it
ran with; both find the folder here, so neither imports the other for it.
"""

from pathlib import Path

from installer.base.paths import state_dir
from installer.inventory import Inventory


def workdir(inv: Inventory) -> Path:
    return state_dir() / "terraform" / inv.deployment
