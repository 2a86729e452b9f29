"""Shared helpers for the Terraform unit tests: inventories from fixtures, HCL parsing."""

from pathlib import Path
from typing import Any

import hcl2

from installer.inventory import Inventory, load_inventory

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "terraform" / "modules"
FIXTURES = Path(__file__).parent / "fixtures" / "terraform"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk0cGzTuJ8mWcR0x4dXb6j1dP2E4tqG0Zl2iNQ3cF7t test"


def cloud_inventory(provider: str, tmp_path: Path) -> Inventory:
    """The fixture for `provider`, with a real weights directory and public key next to it."""
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "id_ed25519.pub").write_text(PUBLIC_KEY + "\n")
    text = (FIXTURES / f"{provider}.yml").read_text()
    path = tmp_path / f"{provider}.yml"
    path.write_text(text.replace("MODEL", "weights").replace("KEY", "id_ed25519.pub"))
    return load_inventory(path)


def parse_module(provider: str) -> dict[str, list[Any]]:
    """All blocks of a module's .tf files, merged by block type (python-hcl2)."""
    merged: dict[str, list[Any]] = {}
    for tf in sorted((MODULES / provider).glob("*.tf")):
        with tf.open() as fh:
            for kind, blocks in hcl2.load(fh).items():
                merged.setdefault(kind, []).extend(blocks)
    return merged


def unquote(name: str) -> str:
    return name.strip('"')


def variables(provider: str) -> dict[str, dict[str, Any]]:
    return {
        unquote(k): v
        for block in parse_module(provider).get("variable", [])
        for k, v in block.items()
    }
