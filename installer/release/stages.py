"""The gateways' stages file: each model's weights between its stable and canary engines
(service/ reads it like drain.json), written by the control machine on every gateway host.

    {"models": {"<served name>": {"weights": {"stable": 80, "canary": 20}, "sticky": "key",
                                  "first_byte_timeout_s": 10, "answer_timeout_s": 120,
                                  "controller": "<release id>"}}}

A model absent from it is served 100% by stable, so the file with no model is the deployment
without a release.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from installer.base.errors import InstallerError
from installer.day2 import drain
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory, ReleaseSettings
from installer.inventory.topology import HOST_LAYOUT
from installer.release import state

STAGES_FILE = HOST_LAYOUT["pli_stages_file"]  # where the gateway role tells the gateway to read it


class StagesError(InstallerError):
    """The stages file could not be written on every gateway host."""


@dataclass(frozen=True)
class Split:
    """One model's line of the file."""

    canary: int  # percent; stable takes the rest
    sticky: str = "key"  # key | session
    first_byte_timeout_s: float | None = None  # a streamed canary answer with no first byte by then: retried on stable
    answer_timeout_s: float | None = None  # a whole canary answer not in by then: the same
    # The release whose controller sets the weight in Redis; the gateways follow it, and fall
    # back to `canary` until they read it (service/release_weights.py).
    controller: str | None = None


def split(weight: int, settings: ReleaseSettings, controller: str | None = None) -> Split:
    """A model's line at `weight` percent, with its release settings' stickiness and deadlines."""
    slo = settings.slo
    return Split(weight, settings.sticky, slo.canary_first_byte_timeout_s, slo.canary_answer_timeout_s,
                 controller)


def content(splits: Mapping[str, Split]) -> str:
    """The file for {served name: split}."""
    models: dict[str, dict[str, object]] = {}
    for served, split in sorted(splits.items()):
        if not 0 <= split.canary <= 100:
            raise ValueError(f"canary weight {split.canary} of {served} is not a percentage")
        line: dict[str, object] = {"weights": state.shares(split.canary), "sticky": split.sticky}
        if split.first_byte_timeout_s is not None:
            line["first_byte_timeout_s"] = split.first_byte_timeout_s
        if split.answer_timeout_s is not None:
            line["answer_timeout_s"] = split.answer_timeout_s
        if split.controller:
            line["controller"] = split.controller
        models[served] = line
    return json.dumps({"models": models}, sort_keys=True) + "\n"


def write(inv: Inventory, splits: Mapping[str, Split], hosts: list[Host] | None = None,
          path: str = STAGES_FILE) -> None:
    """Every gateway host (default: every serving host) gets the same file, atomically."""
    chosen = drain.serving(inv) if hosts is None else hosts
    failures = remote.failures(remote.write([target(inv, h) for h in chosen], path, content(splits)))
    if failures:
        raise StagesError(
            "could not write the stages file on every gateway host",
            [*failures, "gateways that were not told keep the weights they had: fix the host and run the "
             "same `installer release` command again (writing the file is idempotent)"],
        )
