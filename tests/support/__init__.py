"""Helpers shared by test suites (unit, integration, e2e): imported from here, never from
another test module or a conftest (pyproject.toml, [tool.importlinter])."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
