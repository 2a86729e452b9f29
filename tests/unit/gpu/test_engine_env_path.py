"""The engine unit's PATH (templates/engine.env.j2): vLLM's JIT compilers start tools by name.

On the H200 (2026-12-01) the deployed engine died at its first start with FileNotFoundError
'ninja': FlashInfer builds its sampling kernels with ninja and nvcc on first use, and a systemd
unit's PATH is systemd's bare default, which holds neither the venv's tools, the reused PyTorch
environment's ninja, nor CUDA's toolkit.
"""

from pathlib import Path

from installer.inventory.models import Inventory
from installer.planning import plan as deployment_plan
from tests.support.engine_role import render_role, rendered_vars


def _inventory(tmp: Path) -> Inventory:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return Inventory.model_validate({
        "deployment": "demo", "model": {"path": str(model), "served_name": "m"},
        "hosts": [{"name": "h0", "address": "10.0.0.1"}], "engine": {"device": "gpu"},
    })


def _path(env: str) -> list[str]:
    (line,) = [x for x in env.splitlines() if x.startswith("PATH=")]
    return line.removeprefix("PATH=").split(":")


def test_the_engine_finds_the_venvs_tools_then_cudas(tmp_path: Path) -> None:
    variables = rendered_vars(deployment_plan.build(_inventory(tmp_path)), "h0")
    path = _path(render_role(tmp_path, variables)["engine.env"])
    assert path[0] == "/opt/private-llm/current/venv/bin"  # the release the unit runs
    assert "/usr/local/cuda/bin" in path and "/usr/bin" in path
    assert not any("torch" in p for p in path)


def test_a_reused_pytorch_environment_lends_its_tools(tmp_path: Path) -> None:
    variables = rendered_vars(deployment_plan.build(_inventory(tmp_path)), "h0")
    variables["engine_host_torch"] = "/opt/torch/.venv"
    path = _path(render_role(tmp_path, variables)["engine.env"])
    assert path[:2] == ["/opt/private-llm/current/venv/bin", "/opt/torch/.venv/bin"]
    assert path.index("/opt/torch/.venv/bin") < path.index("/usr/local/cuda/bin")
