"""The gateways' stages file: each model's weights between its stable and canary engines
(service/ reads it like drain.json), written by the control machine on every gateway host.

    {"models": {"<served name>": {"weights": {"stable": 80, "canary": 20}, "sticky": "key"}}}

A model absent from it is served 100% by stable, so the file with no model is the deployment
without a release.
"""

import json
from collections.abc import Mapping

from installer.day2 import drain
from installer.errors import InstallerError
from installer.inventory import Host, Inventory
from installer.topology import HOST_LAYOUT

# topology.HOST_LAYOUT names it for the gateway role; the same place as drain.json otherwise.
STAGES_FILE = HOST_LAYOUT.get("pli_stages_file", f"{HOST_LAYOUT['pli_config_dir']}/stages.json")


class StagesError(InstallerError):
    """The stages file could not be written on every gateway host."""


def content(weights: Mapping[str, tuple[int, str]]) -> str:
    """The file for {served name: (canary weight in percent, sticky)}; weights sum to 100."""
    models = {}
    for served, (canary, sticky) in sorted(weights.items()):
        if not 0 <= canary <= 100:
            raise ValueError(f"canary weight {canary} of {served} is not a percentage")
        models[served] = {"weights": {"stable": 100 - canary, "canary": canary}, "sticky": sticky}
    return json.dumps({"models": models}, sort_keys=True) + "\n"


def write(inv: Inventory, weights: Mapping[str, tuple[int, str]], hosts: list[Host] | None = None,
          path: str = STAGES_FILE) -> None:
    """Every gateway host (default: every serving host) gets the same file, atomically."""
    failures = drain.write_on_hosts(inv, drain.serving(inv) if hosts is None else hosts, path, content(weights))
    if failures:
        raise StagesError(
            "could not write the stages file on every gateway host",
            [*failures, "gateways that were not told keep the weights they had: fix the host and run the "
             "same `installer release` command again (writing the file is idempotent)"],
        )
