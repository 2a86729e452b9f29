"""Inventory errors: each fixture's first line says the line number and message it must produce."""

import subprocess
import sys
from pathlib import Path

import pytest

from installer.errors import InventoryError
from installer.inventory import load_inventory

FIXTURES = Path(__file__).parent / "fixtures" / "inventory"


def _materialize(fixture: Path, tmp_path: Path) -> Path:
    """Copy a fixture, pointing MODEL at a real weights directory so only the intended error remains."""
    model = tmp_path / "weights"
    model.mkdir()
    (model / "config.json").write_text("{}")
    dest = tmp_path / fixture.name
    dest.write_text(fixture.read_text().replace("MODEL", str(model)))
    return dest


def _expectation(fixture: Path) -> str:
    first = fixture.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{fixture.name} must start with '# expect: '"
    return first.removeprefix("# expect: ")


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.yml")), ids=lambda p: p.stem)
def test_inventory_fixture(fixture: Path, tmp_path: Path) -> None:
    path = _materialize(fixture, tmp_path)
    expect = _expectation(fixture)
    if expect == "ok":
        inv = load_inventory(path)
        assert inv.hosts[1].ssh.port == 2222
        return
    line, message = expect.split(" ", 1)
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    text = "\n".join([str(err.value), *err.value.details])
    assert f"{path}:{line}: " in text, text
    assert message in text, text


def test_relative_paths_resolve_against_the_inventory_file(tmp_path: Path) -> None:
    (tmp_path / "site" / "weights").mkdir(parents=True)
    (tmp_path / "site" / "weights" / "config.json").write_text("{}")
    (tmp_path / "site" / "id_ed25519").write_text("key")
    inv_file = tmp_path / "site" / "site.yml"
    inv_file.write_text(
        "deployment: d\nssh: {private_key: id_ed25519}\n"
        "model: {path: weights, served_name: m}\nhosts: [{name: a, address: 10.1.1.1}]\n"
    )
    inv = load_inventory(inv_file)
    assert inv.model.path == tmp_path / "site" / "weights"
    assert inv.ssh.private_key == tmp_path / "site" / "id_ed25519"


def test_missing_ssh_key_names_the_key_and_line(tmp_path: Path) -> None:
    path = _materialize(FIXTURES / "ok.yml", tmp_path)
    path.write_text(path.read_text() + "ssh:\n  private_key: /no/such/key\n")
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert any(f"{path}:13: ssh.private_key: /no/such/key does not exist" in d for d in err.value.details)


def test_cli_validate_prints_errors_and_exits_1(tmp_path: Path) -> None:
    path = _materialize(FIXTURES / "typo_key.yml", tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "from installer.cli import main; main()", "validate", "-i", str(path)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 1
    assert f"{path}:6: hosts[0].adress: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_validate_ok(tmp_path: Path) -> None:
    path = _materialize(FIXTURES / "ok.yml", tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "from installer.cli import main; main()", "validate", "-i", str(path)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout
