"""Shared helpers for the Terraform unit tests: inventories from fixtures, HCL parsing."""

import os
from pathlib import Path
from typing import Any

import hcl2
import pytest

from installer.inventory import Inventory, load_inventory

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "terraform" / "modules"
FIXTURES = Path(__file__).parents[1] / "unit" / "fixtures" / "terraform"
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


def marker_terraform(marker: Path) -> bytes:
    """A terraform that records every call in `marker`, answers `version -json` (so a trusted
    bundle's copy gets as far as `init`) and succeeds with no output (no resources)."""
    return (
        f'#!/bin/sh\necho "$@" >> {marker}\n'
        'case "$*" in *version*) echo \'{"terraform_version": "1.9.8"}\';; esac\nexit 0\n'
    ).encode()


def operator_env(monkeypatch: pytest.MonkeyPatch, path_bin: Path, terraform: bytes) -> None:
    """An operator's shell: cloud credentials set (without them nothing would run anyway), no
    terraform overrides, and a terraform on PATH, so a test that refuses can show that no
    terraform at all ran, not only the bundle's."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    for name in ("INSTALLER_TERRAFORM", "INSTALLER_TF_PLUGIN_MIRROR"):
        monkeypatch.delenv(name, raising=False)
    path_bin.mkdir()
    (path_bin / "terraform").write_bytes(terraform)
    (path_bin / "terraform").chmod(0o755)
    monkeypatch.setenv("PATH", f"{path_bin}{os.pathsep}{os.environ['PATH']}")
