"""An inventory of DeepSeek-V3 on two 8-GPU hosts, read from a file (so messages carry file:line)."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from installer.gpu import planner
from installer.inventory import Inventory, load_inventory


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def two_hosts(tmp_path: Path) -> Callable[..., Inventory]:
    def make(gpu: str = "h100", count: int = 8, extra: str = "", preset: str = "deepseek-v3",
             bf16: bool = False) -> Inventory:
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        config = dict(planner.PRESETS[preset])
        if bf16:  # the checkpoint as DeepSeek's fp8-to-bf16 conversion leaves it
            config.pop("quantization_config", None)
        (model / "config.json").write_text(json.dumps(config))
        f = tmp_path / "inventory.yml"
        f.write_text(
            "deployment: demo\n"
            f"model: {{path: {model}, served_name: deepseek-v3}}\n"
            "hosts:\n"
            "  - {name: h0, address: 10.0.0.1}\n"
            "  - {name: h1, address: 10.0.0.2}\n"
            "engine: {device: gpu, max_model_len: 8192}\n"
            f"gpu: {{type: {gpu}, count: {count}}}\n" + extra
        )
        return load_inventory(f)

    return make
