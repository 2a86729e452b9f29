"""A deployment's inventory file for the inventory tests: `tmp/site.yml`, deployment demo, model
tiny from `tmp/weights` (a folder with a config.json), the hosts, then the sections the test is
about; and what `validate` refuses in it."""

from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.preparation.inventory_checks import check_inventory

ONE_HOST = "hosts:\n  - name: h1\n    address: 10.0.0.1\n"
JWT_ISSUER = "  jwt:\n    issuers: [https://idp.example.internal/realms/llm]\n    audiences: [private-llm]\n"


def site_file(tmp: Path, sections: str = "", hosts: str = ONE_HOST) -> Path:
    model = tmp / "weights"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    path = tmp / "site.yml"
    path.write_text(f"deployment: demo\nmodel: {{path: {model}, served_name: tiny}}\n{hosts}{sections}")
    return path


def refusals(path: Path) -> list[str]:
    """The problems `validate` names in the file (it must refuse it)."""
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(path))
    return list(err.value.details)
