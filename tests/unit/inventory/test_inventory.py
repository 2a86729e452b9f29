"""Inventory errors: each fixture's first line says the line number and message it must produce."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from installer.base.errors import InventoryError
from installer.gpu import planner
from installer.inventory import Inventory, load_inventory
from installer.preparation.inventory_checks import check_inventory

REPO = Path(__file__).parents[3]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "inventory"


def _materialize(fixture: Path, tmp_path: Path) -> Path:
    """Copy a fixture, pointing MODEL at a real weights directory so only the intended error remains."""
    model = tmp_path / "weights"
    model.mkdir()
    (model / "config.json").write_text("{}")
    dest = tmp_path / fixture.name
    # bytes: some fixtures are deliberately not UTF-8
    dest.write_bytes(fixture.read_bytes().replace(b"MODEL", str(model).encode()))
    return dest


def _expectation(fixture: Path) -> str:
    first = fixture.read_bytes().splitlines()[0].decode()
    assert first.startswith("# expect: "), f"{fixture.name} must start with '# expect: '"
    return first.removeprefix("# expect: ")


def _validate(path: Path) -> Inventory:
    """What `installer validate` and `installer up` both run."""
    inv = load_inventory(path)
    check_inventory(inv)
    return inv


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.yml")), ids=lambda p: p.stem)
def test_inventory_fixture(fixture: Path, tmp_path: Path) -> None:
    path = _materialize(fixture, tmp_path)
    expect = _expectation(fixture)
    if expect == "ok":
        inv = _validate(path)
        assert inv.hosts[1].ssh.port == 2222
        return
    line, message = expect.split(" ", 1)
    with pytest.raises(InventoryError) as err:
        _validate(path)
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


def _cli_validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from installer.cli import main; main()", "validate", "-i", str(path)],
        capture_output=True, text=True, check=False,
    )


def test_cli_validate_runs_the_fit_check_up_runs(tmp_path: Path) -> None:
    path = _materialize(FIXTURES / "ok.yml", tmp_path)
    (tmp_path / "weights" / "config.json").write_text(json.dumps(planner.PRESETS["deepseek-v3"]))
    path.write_text(path.read_text().replace("device: cpu", "device: gpu") + "gpu: {type: h100, count: 4}\n")
    proc = _cli_validate(path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "hosts of 4 x h100" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_validate_refuses_a_binary_file_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yml"
    path.write_bytes(b"deployment: demo\n\x89PNG\r\n\x1a\n\x00\x00")
    proc = _cli_validate(path)
    assert proc.returncode == 1
    assert f"{path}:2: not UTF-8 text (byte 0x89)" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("example", sorted((REPO / "inventory").glob("*.example.yml")), ids=lambda p: p.name)
def test_example_inventories_pass_validate(example: Path, tmp_path: Path) -> None:
    # The examples name files on the reader's machine; point them at real ones here.
    data = yaml.safe_load(example.read_text())
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text(json.dumps(planner.PRESETS["deepseek-r1-distill-qwen-7b"]))
    (tmp_path / "id_ed25519").write_text("key")
    (tmp_path / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA user@host\n")
    data["model"]["path"] = "weights"
    data["ssh"]["private_key"] = "id_ed25519"
    if "cloud" in data:
        data["cloud"]["ssh_public_key"] = "id_ed25519.pub"
    path = tmp_path / example.name
    path.write_text(yaml.safe_dump(data))
    _validate(path)
