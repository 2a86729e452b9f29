"""`installer doctor` and the GPU fit section, driven as a user would (typer's CliRunner)."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.cli import gpu as gpu_cli
from installer.cli import terraform as tf_cli
from installer.cli.ui import console
from installer.gpu import planner
from installer.inventory import load_inventory

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
H200_CHECK = json.loads((FIXTURES / "h200_r580" / "doctor_check.json").read_text())["hosts"][0]


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    _register()
    return tmp_path / "state"


def test_doctor_needs_an_inventory_or_local() -> None:
    r = CliRunner().invoke(app, ["doctor"])
    assert r.exit_code == 2 and "give --inventory FILE or --local" in r.output


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_doctor_local_on_a_machine_without_gpu(tmp_path: Path) -> None:
    out = tmp_path / "doctor.json"
    r = CliRunner().invoke(app, ["doctor", "--local", "--json", str(out)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "no NVIDIA GPU detected" in r.output
    assert json.loads(out.read_text())["hosts"][0]["status"] == "skip"


def test_table_row_of_the_h200_result() -> None:
    row = gpu_cli._row(H200_CHECK)
    assert row[:5] == ["vm", "[green]ok[/]", "1 x NVIDIA H200", "580.159.04", "13.0"]
    assert row[5:8] == ["Enabled", "Enabled", "Disabled"]
    assert row[9] == "788" and row[10] == "ok (1 GPU)"


def test_a_host_without_a_result_has_its_error_under_problems() -> None:
    row = gpu_cli._row({"host": "b", "status": "fail", "error": "ssh rc 255: Connection refused"})
    assert len(row) == 12 and row[-1] == "ssh rc 255: Connection refused" and row[2:-1] == ["-"] * 9


def _inventory(tmp_path: Path, preset: str, engine: str = "{device: gpu}") -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(planner.PRESETS[preset]))
    inv = tmp_path / "site.yml"
    inv.write_text(
        f"deployment: demo\nmodel: {{path: {model}, served_name: m}}\n"
        f"hosts: [{{name: vm, address: 10.0.0.1}}]\nengine: {engine}\n"
    )
    return inv


def test_fit_section_without_gpu_facts_says_how_to_get_them(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "deepseek-v2-lite"))
    with console.capture() as cap:
        assert tf_cli.print_fit_section(inv) is None
    assert "run `installer doctor -i <inventory>` once" in cap.get()


def test_fit_section_from_the_last_doctor_run(tmp_path: Path, _state: Path) -> None:
    run = _state / "runs" / "20261129-101655-doctor-demo"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"command": "doctor", "deployment": "demo", "hosts": [H200_CHECK]}))
    inv = load_inventory(_inventory(tmp_path, "deepseek-v2-lite"))
    with console.capture() as cap:
        tuned = tf_cli.print_fit_section(inv)
    text = cap.get()
    assert tuned is not None and tuned.settings["tensor_parallel_size"] == 1
    assert "installer doctor: 1 host(s) probed" in text and "full concurrency" in text
    assert [e.env["CUDA_VISIBLE_DEVICES"] for e in tuned.engines] == ["0"]


def test_fit_section_says_what_hardware_is_missing(tmp_path: Path, _state: Path) -> None:
    run = _state / "runs" / "20261129-101655-doctor-demo"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"command": "doctor", "deployment": "demo", "hosts": [H200_CHECK]}))
    inv = load_inventory(_inventory(tmp_path, "deepseek-v3"))
    with console.capture() as cap:
        assert tf_cli.print_fit_section(inv) is None
    assert "needs 6 hosts of 1 x h200" in cap.get()


def test_cpu_deployments_have_no_gpu_fit(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "deepseek-v2-lite", "{device: cpu}"))
    assert tf_cli.print_fit_section(inv) is None


def test_cli_module_is_registered() -> None:
    assert "doctor" in {
        c.name or c.callback.__name__ for c in app.registered_commands if c.callback
    }
