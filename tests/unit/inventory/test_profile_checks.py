"""What a serving profile refuses, at `installer validate` (the loader runs the checks) or at
preflight, each at its setting's file:line with the fix, before anything changes."""

import json
import shutil
from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory, profile_checks, vllm_registry
from installer.preflight import gpu as preflight_gpu

CHECKPOINTS = Path(__file__).parents[1] / "fixtures" / "checkpoints"


def _site(tmp_path: Path, weights: str, model: str = "", engine: str = "{device: gpu}", more: str = "") -> Path:
    shutil.copytree(CHECKPOINTS / weights, tmp_path / "weights")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: ds\n"                         # 1
        "hosts: [{name: g1, address: 10.0.0.1}]\n"  # 2
        "model:\n"                                  # 3
        "  path: weights\n"                         # 4
        "  served_name: chat\n"                     # 5
        f"{model}"                                  # 6...
        f"engine: {engine}\n{more}"
    )
    return path


def _refused(path: Path) -> list[str]:
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    return err.value.details


def test_a_profile_of_another_family_than_the_checkpoint_is_refused(tmp_path: Path) -> None:
    path = _site(tmp_path, "llama", "  profile: deepseek-r1\n")
    assert _refused(path) == [
        f"{path}:6: model.profile: profile deepseek-r1 is for DeepSeek-R1 checkpoints (architectures "
        f"DeepseekV3ForCausalLM), and {tmp_path / 'weights' / 'config.json'} has architectures [LlamaForCausalLM]: "
        "set profile: auto (it picks none for this checkpoint) or none"
    ]


def test_a_v3_profile_on_v2_lite_is_another_family_too(tmp_path: Path) -> None:
    (problem,) = _refused(_site(tmp_path, "deepseek-v2-lite", "  profile: deepseek-v3\n"))
    assert "has architectures [DeepseekV2ForCausalLM]: set profile: auto (it picks deepseek-v2" in problem


def test_an_unknown_profile_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    path = _site(tmp_path, "deepseek-r1", "  profile: r1\n")
    (problem,) = _refused(path)
    assert problem.startswith(f"{path}:6: model.profile: unknown profile 'r1'; use one of auto, none, deepseek-v2,")


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_a_parser_the_bundled_vllm_lacks_is_refused_with_the_ones_it_has(tmp_path: Path, device: str) -> None:
    path = _site(tmp_path, "deepseek-r1", "  reasoning_parser: deepseek_r2\n", engine=f"{{device: {device}}}")
    names = vllm_registry.for_device(device)
    assert _refused(path) == [
        f"{path}:6: model.reasoning_parser: reasoning parser 'deepseek_r2' is not one {names.label} registers "
        f"(the {device} engine the bundle carries, installer/inventory/vllm_names.json); use one of: "
        + ", ".join(names.reasoning_parsers)
    ]


def test_an_unknown_tool_parser_of_a_models_entry_is_refused_at_its_line(tmp_path: Path) -> None:
    shutil.copytree(CHECKPOINTS / "deepseek-v3.1", tmp_path / "weights")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: ds\nhosts: [{name: g1, address: 10.0.0.1}]\nengine: {device: gpu}\nmodels:\n"
        "  - name: chat\n    served_name: chat\n    path: weights\n"
        "    tool_call_parser: deepseek_v31_fast\n"
    )
    (problem,) = _refused(path)
    assert problem.startswith(f"{path}:8: models[0].tool_call_parser: tool-call parser 'deepseek_v31_fast' is not one "
                              "vLLM 0.26.0 registers")


def test_mtp_for_a_checkpoint_without_mtp_layers_is_refused(tmp_path: Path) -> None:
    path = _site(tmp_path, "deepseek-v2-lite", "  mtp_tokens: 1\n")
    assert _refused(path) == [
        f"{path}:6: model.mtp_tokens: {tmp_path / 'weights' / 'config.json'} has no MTP layers (no "
        "num_nextn_predict_layers above 0), so there is no draft to speculate with: remove mtp_tokens or set it to 0"
    ]


def test_mtp_on_cpu_engines_is_refused(tmp_path: Path) -> None:
    path = _site(tmp_path, "deepseek-r1", "  mtp_tokens: 1\n", engine="{device: cpu}")
    assert _refused(path) == [
        f"{path}:6: model.mtp_tokens: MTP speculative decoding runs on GPU engines only and engine.device is cpu: "
        "remove mtp_tokens or set it to 0"
    ]


def test_mtp_tokens_vllm_would_refuse_for_the_layers_are_refused(tmp_path: Path) -> None:
    shutil.copytree(CHECKPOINTS / "deepseek-r1", tmp_path / "weights")
    config = tmp_path / "weights" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "num_nextn_predict_layers": 2}))
    path = tmp_path / "site.yml"
    path.write_text("deployment: ds\nhosts: [{name: g1, address: 10.0.0.1}]\n"
                    "model: {path: weights, served_name: chat, mtp_tokens: 3}\nengine: {device: gpu}\n")
    (problem,) = _refused(path)
    assert problem.startswith(f"{path}:3: model.mtp_tokens: 3 with 2 MTP layers: vLLM takes at most")


@pytest.mark.parametrize(("gpu", "said"), [
    ("{type: a100-80g, count: 8}", "gpu.type a100-80g"),
    ("{generation: ampere}", "gpu.generation ampere"),
])
def test_fp8_weights_on_declared_gpus_without_fp8_are_refused(tmp_path: Path, gpu: str, said: str) -> None:
    path = _site(tmp_path, "deepseek-v3", more=f"gpu: {gpu}\n")
    problems = _refused(path)
    assert problems[0] == (
        f"{path}:4: model.path: the weights are fp8 ({tmp_path / 'weights' / 'config.json'} quantization_config "
        f"quant_method fp8), and {said} ({path}:7: {said.split()[0]}) has no fp8 tensor cores (ampere; fp8 needs "
        "compute capability 8.9: Ada, Hopper, Blackwell): serve a bf16 copy of the checkpoint, or deploy to such GPUs"
    )


def test_fp8_weights_on_hopper_pass(tmp_path: Path) -> None:
    load_inventory(_site(tmp_path, "deepseek-v3", more="gpu: {type: h200, count: 8}\n"))


def test_a_quantization_the_checkpoint_contradicts_is_refused(tmp_path: Path) -> None:
    shutil.copytree(CHECKPOINTS / "llama", tmp_path / "weights")
    config = tmp_path / "weights" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "quantization_config": {"quant_method": "awq", "bits": 4}}))
    path = tmp_path / "site.yml"
    path.write_text("deployment: ds\nhosts: [{name: g1, address: 10.0.0.1}]\nmodel: {path: weights, served_name: c}\n"
                    "engine:\n  device: gpu\n  quantization: fp8\n")
    (problem,) = _refused(path)
    assert problem.startswith(f"{path}:6: engine.quantization: fp8, but the checkpoint is quantized already (")
    assert problem.endswith("quant_method awq); vLLM serves those weights as they are and refuses a --quantization "
                            "that differs (vllm/config/model.py): remove quantization")


def test_fp8_asked_for_an_fp8_checkpoint_contradicts_nothing(tmp_path: Path) -> None:
    load_inventory(_site(tmp_path, "deepseek-v3", engine="{device: gpu, quantization: fp8}"))


def test_profile_settings_on_an_embed_model_are_refused(tmp_path: Path) -> None:
    shutil.copytree(CHECKPOINTS / "llama", tmp_path / "weights")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: ds\nhosts: [{name: g1, address: 10.0.0.1}]\nengine: {device: cpu}\nmodels:\n"
        "  - {name: chat, served_name: chat, path: weights}\n"
        "  - {name: emb, served_name: emb, path: weights, task: embed, reasoning_parser: deepseek_r1}\n"
    )
    assert _refused(path) == [
        f"{path}:6: models[1].reasoning_parser: profiles serve generate models and model emb has task embed: "
        "remove reasoning_parser"
    ]


def test_extra_args_may_not_set_a_flag_the_profile_owns(tmp_path: Path) -> None:
    path = _site(tmp_path, "deepseek-r1", engine="{device: gpu, extra_args: ['-sc={}', --reasoning-parser, x]}")
    problems = _refused(path)
    assert problems[0].startswith(
        f"{path}:6: engine.extra_args[0]: vLLM reads '-sc={{}}' as --speculative-config, which is set by the "
        "installer; remove it from extra_args and set the model's profile")
    assert problems[1].startswith(f"{path}:6: engine.extra_args[1]: --reasoning-parser is set by the installer")


def test_a_config_that_is_no_json_is_refused_unless_the_profile_is_none(tmp_path: Path) -> None:
    path = _site(tmp_path, "deepseek-r1")
    (tmp_path / "weights" / "config.json").write_text("{")
    (problem,) = _refused(path)
    assert problem.startswith(f"{path}:4: model.path: {tmp_path / 'weights' / 'config.json'} is not valid JSON")
    assert problem.endswith("fix it, or set profile: none (no flags from the checkpoint)")
    path.write_text(path.read_text().replace("  served_name: chat\n", "  served_name: chat\n  profile: none\n"))
    load_inventory(path)


def test_preflight_refuses_probed_gpus_without_fp8_for_fp8_weights(tmp_path: Path) -> None:
    inv = load_inventory(_site(tmp_path, "deepseek-v3"))  # the GPUs are not declared: preflight judges them
    needs = preflight_gpu.needs(inv, [])
    assert needs is not None and needs.fp8_weights == (f"model main ({tmp_path / 'site.yml'}:4: model.path)",)
    a100 = {"gpu_smi": "yes", "gpu_rows": "NVIDIA A100-SXM4-80GB, 81920, 580.95.05;", "gpu_dev": "1", "gpu_pci": "1"}
    assert preflight_gpu.judge(a100, needs) == [
        f"model main ({tmp_path / 'site.yml'}:4: model.path) has fp8 weights (config.json quantization_config "
        "quant_method fp8), and the host's NVIDIA A100-SXM4-80GB (ampere, compute capability 8.0) has no fp8 "
        "tensor cores (Ada, Hopper, Blackwell): serve a bf16 copy of the checkpoint, or deploy to such GPUs"
    ]
    h200 = {**a100, "gpu_rows": "NVIDIA H200, 143771, 580.95.05;"}
    assert preflight_gpu.judge(h200, needs) == []
    # the weights decide, not the profile; CPU engines have no GPUs to judge
    assert profile_checks.fp8_weights(load_inventory(_site(tmp_path / "r1", "deepseek-r1", "  profile: none\n")))
    on_cpu = load_inventory(_site(tmp_path / "cpu", "deepseek-r1", engine="{device: cpu}"))
    assert profile_checks.fp8_weights(on_cpu) == ()
