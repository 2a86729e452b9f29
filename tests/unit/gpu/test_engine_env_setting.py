"""`engine.env`: switches the engine reads only from its environment (VLLM_USE_DEEP_GEMM,
NCCL_SOCKET_IFNAME, ...) reach the engine's unit as `Environment=` lines, a model's own replace
the top level's, and the names the installer sets itself, or values a unit line would read
differently, are refused at their file:line."""

from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from installer.preparation.inventory_checks import check_inventory
from tests.support.engine_role import render_role, rendered_vars


def _site(tmp: Path, engine: str, models: str = "") -> Path:
    (tmp / "model").mkdir(exist_ok=True)
    (tmp / "model" / "config.json").write_text("{}")
    site = tmp / "site.yml"
    model = models or "model: {path: model, served_name: m}\n"
    site.write_text(f"deployment: demo\n{model}hosts:\n  - {{name: h0, address: 10.0.0.1}}\n{engine}")
    return site


def _refusal(site: Path) -> str:
    with pytest.raises(InventoryError) as err:
        check_inventory(load_inventory(site))
    return "\n".join([str(err.value), *err.value.details])


def test_engine_env_reaches_the_unit_and_nothing_else(tmp_path: Path) -> None:
    site = _site(tmp_path, "engine:\n  device: gpu\n  env:\n    VLLM_USE_DEEP_GEMM: \"0\"\n"
                           "    NCCL_SOCKET_IFNAME: ^lo,docker0\n")
    plan = deployment_plan.build(load_inventory(site))
    env = dict(plan.hosts[0].engines[0].env)
    assert env["VLLM_USE_DEEP_GEMM"] == "0" and env["NCCL_SOCKET_IFNAME"] == "^lo,docker0"
    files = render_role(tmp_path / "r", rendered_vars(plan, "h0"))
    unit = files["private-llm-engine"]
    assert "Environment=VLLM_USE_DEEP_GEMM=0\n" in unit and "Environment=NCCL_SOCKET_IFNAME=^lo,docker0\n" in unit
    assert "VLLM_USE_DEEP_GEMM" not in files["engine.env"]


def test_an_inventory_without_engine_env_dumps_as_before(tmp_path: Path) -> None:
    inv = load_inventory(_site(tmp_path, "engine: {device: gpu}\n"))
    assert "env" not in inv.engine.model_dump()  # the revisions' config digest stays what it was


def test_a_models_own_env_replaces_the_top_levels(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    models = ("models:\n  - {name: a, served_name: a, path: model}\n"
              "  - {name: b, served_name: b, path: model, engine: {env: {NCCL_DEBUG: WARN}}}\n")
    inv = load_inventory(_site(tmp_path, "engine:\n  device: gpu\n  env: {NCCL_DEBUG: INFO, NCCL_IB_DISABLE: \"1\"}\n",
                               models))
    a, b = inv.served_models()
    assert a.engine.env == {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1"}
    assert b.engine.env == {"NCCL_DEBUG": "WARN"}


@pytest.mark.parametrize(("env", "said"), [
    ("HOME: /root", "HOME is set by the installer"),
    ("CUDA_VISIBLE_DEVICES: \"0\"", "CUDA_VISIBLE_DEVICES is set by the installer"),
    ("RAY_ADDRESS: 10.0.0.9", "RAY_ADDRESS is set by the installer"),
    ("LD_PRELOAD: /tmp/x.so", "LD_PRELOAD is set by the installer"),
    ("LD_AUDIT: /tmp/x.so", "LD_AUDIT is set by the installer"),
    ("PYTHONSTARTUP: /tmp/x.py", "PYTHONSTARTUP is set by the installer"),
    ("VLLM_API_KEY: abc", "the gateway is the engine's only client"),
    ("VLLM_DEBUG_LOG_API_SERVER_RESPONSE: \"1\"", "answers stay out of logs"),
    ("VLLM_USE_FLASHINFER_SAMPLER: \"1\"", "set engine.flashinfer_sampler"),
    ("lower_case: x", "is not an environment variable name"),
    ("NCCL_DEBUG: \"INFO\\nLD_PRELOAD=/x.so\"", "is not a value an engine unit takes as it is"),
    ("NCCL_DEBUG: \"%h\"", "is not a value an engine unit takes as it is"),
    ("NCCL_DEBUG: a b", "is not a value an engine unit takes as it is"),
    ("VLLM_USE_DEEP_GEMM: 0", "valid string"),
])
def test_refused_at_its_line(tmp_path: Path, env: str, said: str) -> None:
    site = _site(tmp_path, f"engine:\n  device: gpu\n  env:\n    {env}\n")
    text = _refusal(site)
    assert f"{site}:8: " in text and said in text, text
