"""The lab's tiny DeepSeek: DeepSeek-V3's config fields, tensor names and shapes, its fp8 format,
its tokenizer's markers and chat template, and byte-identical output for a seed."""

import hashlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
from tokenizers import Tokenizer
from transformers import AutoTokenizer, DeepseekV3Config

from installer.modelmaker import deepseek, make_tiny_model
from installer.modelmaker.files import bf16
from installer.modelmaker.fp8 import E4M3_MAX, e4m3_decode, e4m3_encode, expand_block_scales

FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
LINEARS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MARKERS = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
]
# vLLM's deepseek_v3 tool parser (tool_parsers/deepseekv3_tool_parser.py, 0.26.0 and 0.32.0).
TOOL_CALL_REGEX = re.compile(
    r"<｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<function_name>.*)\n```json\n"
    r"(?P<function_arguments>.*)\n```<｜tool▁call▁end｜>"
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("deepseek")
    return {kind: make_tiny_model(root / kind, kind=kind) for kind in ("deepseek", "deepseek-fp8")}


def _config(model: Path) -> dict[str, Any]:
    return json.loads((model / "config.json").read_text())


def _tensors(model: Path) -> dict[str, dict[str, Any]]:
    # safetensors' own parser: it checks the header and that the byte ranges tile the file.
    return dict(safetensors.deserialize((model / "model.safetensors").read_bytes()))


def _digests(model: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model.iterdir())}


def _expected_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor DeepSeek-V3's checkpoint has for config `c`, with its shape."""
    hidden, vocab, heads = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    qk_head_dim = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (vocab, hidden),
    }
    layers = c["num_hidden_layers"]
    for i in range(layers + c["num_nextn_predict_layers"]):
        layer = {
            "input_layernorm.weight": (hidden,),
            "post_attention_layernorm.weight": (hidden,),
            "self_attn.q_a_proj.weight": (c["q_lora_rank"], hidden),
            "self_attn.q_a_layernorm.weight": (c["q_lora_rank"],),
            "self_attn.q_b_proj.weight": (heads * qk_head_dim, c["q_lora_rank"]),
            "self_attn.kv_a_proj_with_mqa.weight": (c["kv_lora_rank"] + c["qk_rope_head_dim"], hidden),
            "self_attn.kv_a_layernorm.weight": (c["kv_lora_rank"],),
            "self_attn.kv_b_proj.weight": (heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]),
            "self_attn.o_proj.weight": (hidden, heads * c["v_head_dim"]),
        }
        if i < c["first_k_dense_replace"]:
            for name, shape in [("gate", (c["intermediate_size"], hidden)), ("up", (c["intermediate_size"], hidden))]:
                layer[f"mlp.{name}_proj.weight"] = shape
            layer["mlp.down_proj.weight"] = (hidden, c["intermediate_size"])
        else:
            layer["mlp.gate.weight"] = (c["n_routed_experts"], hidden)
            layer["mlp.gate.e_score_correction_bias"] = (c["n_routed_experts"],)
            experts = [(f"experts.{e}", c["moe_intermediate_size"]) for e in range(c["n_routed_experts"])]
            experts.append(("shared_experts", c["moe_intermediate_size"] * c["n_shared_experts"]))
            for expert, width in experts:
                layer[f"mlp.{expert}.gate_proj.weight"] = (width, hidden)
                layer[f"mlp.{expert}.up_proj.weight"] = (width, hidden)
                layer[f"mlp.{expert}.down_proj.weight"] = (hidden, width)
        if i >= layers:  # the MTP layer, as DeepSeek-V3 stores it (vLLM's deepseek_mtp.py loads these)
            layer.update(
                {
                    "embed_tokens.weight": (vocab, hidden),
                    "enorm.weight": (hidden,),
                    "hnorm.weight": (hidden,),
                    "eh_proj.weight": (hidden, 2 * hidden),
                    "shared_head.norm.weight": (hidden,),
                    "shared_head.head.weight": (vocab, hidden),
                }
            )
        shapes.update({f"model.layers.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def test_files_present_and_nothing_else(models: dict[str, Path]) -> None:
    for model in models.values():
        assert {p.name for p in model.iterdir()} == FILES
    assert {p.name for p in next(iter(models.values())).parent.iterdir()} == set(models)


@pytest.mark.parametrize("kind", ["deepseek", "deepseek-fp8"])
def test_config_loads_as_deepseek_v3(models: dict[str, Path], kind: str) -> None:
    config = DeepseekV3Config.from_pretrained(models[kind])
    assert config.architectures == ["DeepseekV3ForCausalLM"]
    assert config.model_type == "deepseek_v3"
    # MLA at the sizes vLLM's MLA kernels take (a 512 + 64 latent)
    assert (config.kv_lora_rank, config.qk_rope_head_dim) == (512, 64)
    assert config.q_lora_rank and config.qk_nope_head_dim and config.v_head_dim
    # MoE with grouped sigmoid routing, as DeepSeek-V3
    assert (config.scoring_func, config.topk_method) == ("sigmoid", "noaux_tc")
    assert config.n_shared_experts == 1 and config.norm_topk_prob and config.routed_scaling_factor
    assert config.num_nextn_predict_layers == 1
    assert isinstance(config.rope_parameters, dict) and config.rope_parameters["rope_type"] == "yarn"
    raw = _config(models[kind])
    assert raw["n_routed_experts"] % raw["n_group"] == 0
    assert raw["num_experts_per_tok"] <= raw["topk_group"] * raw["n_routed_experts"] // raw["n_group"]
    assert 0 < raw["first_k_dense_replace"] < raw["num_hidden_layers"]
    assert raw["torch_dtype"] == "bfloat16"
    assert raw.get("quantization_config") == (FP8_CONFIG if kind == "deepseek-fp8" else None)


def test_tensors_are_deepseek_v3s_names_and_shapes(models: dict[str, Path]) -> None:
    config = _config(models["deepseek"])
    expected = _expected_shapes(config)
    tensors = _tensors(models["deepseek"])
    assert {name: tuple(t["shape"]) for name, t in tensors.items()} == expected
    for name, tensor in tensors.items():
        assert tensor["dtype"] == ("F32" if name.endswith("e_score_correction_bias") else "BF16"), name
    moe_layers = [i for i in range(config["num_hidden_layers"] + 1) if i >= config["first_k_dense_replace"]]
    assert {n for n in tensors if n.endswith("e_score_correction_bias")} == {
        f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in moe_layers
    }


def test_fp8_stores_deepseeks_linear_weights_with_block_scales(models: dict[str, Path]) -> None:
    tensors = _tensors(models["deepseek-fp8"])
    plain = _tensors(models["deepseek"])
    quantized = {n for n in plain if n.endswith(".weight") and n.split(".")[-2] in LINEARS}
    assert quantized and not any(".mlp.gate.weight" in n or "eh_proj" in n or "head" in n for n in quantized)
    assert set(tensors) == set(plain) | {n + "_scale_inv" for n in quantized}
    for name in quantized:
        rows, cols = tensors[name]["shape"]
        assert tensors[name]["dtype"] == "F8_E4M3", name
        scales = tensors[name + "_scale_inv"]
        assert scales["dtype"] == "F32"
        assert scales["shape"] == [math.ceil(rows / 128), math.ceil(cols / 128)], name
    for name in set(plain) - quantized:  # the rest is stored as in the bf16 checkpoint
        assert tensors[name] == plain[name], name


def test_fp8_values_decode_to_the_weights_within_e4m3_precision(models: dict[str, Path]) -> None:
    weights = deepseek.float_weights(seed=0)
    tensors = _tensors(models["deepseek-fp8"])
    checked = 0
    for name, tensor in tensors.items():
        if tensor["dtype"] != "F8_E4M3":
            continue
        shape = tuple(tensor["shape"])
        codes = np.frombuffer(tensor["data"], dtype=np.uint8).reshape(shape)
        scale_inv = tensors[name + "_scale_inv"]
        scales = np.frombuffer(scale_inv["data"], dtype="<f4").reshape(scale_inv["shape"])
        per_element = expand_block_scales(scales, shape)
        decoded = e4m3_decode(codes) * per_element
        original = weights[name]
        # 3 mantissa bits: half a step is 2^-4 of the value; below 2^-6 steps are 2^-9 apart.
        tolerance = np.maximum(np.abs(original) * 2.0**-4, per_element * 2.0**-10) * (1 + 1e-6)
        assert np.all(np.abs(decoded - original) <= tolerance), name
        # each block's largest magnitude is stored as 448: the block uses the whole fp8 range
        magnitudes = np.abs(e4m3_decode(codes))
        for r in range(0, shape[0], 128):
            for c in range(0, shape[1], 128):
                assert magnitudes[r : r + 128, c : c + 128].max() == E4M3_MAX, name
        checked += 1
    assert checked > 50


def test_e4m3_encoder_round_trips_every_code_and_rounds_to_nearest_even() -> None:
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
    assert np.array_equal(e4m3_encode(e4m3_decode(codes)), codes)
    samples = np.array([1.0, -2.0, 448.0, 1e6, -1e6, 2.0**-9, 0.0, 1.0625, 1.1875, 2.0**-10], dtype=np.float32)
    # 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39): even wins; 1.1875 between 0x39 and
    # 0x3A goes up to even 0x3A; 2^-10 is halfway between 0 and the smallest subnormal: 0.
    expected = [0x38, 0xC0, 0x7E, 0x7E, 0xFE, 0x01, 0x00, 0x38, 0x3A, 0x00]
    assert e4m3_encode(samples).tolist() == expected
    assert e4m3_decode(np.array([0x7E, 0x7F], dtype=np.uint8))[0] == E4M3_MAX
    assert np.isnan(e4m3_decode(np.array([0x7F], dtype=np.uint8))[0])


def test_bf16_rounds_to_nearest_even() -> None:
    # 1 + 2^-8 is halfway between bf16's 1.0 and 1 + 2^-7: even (1.0) wins; 1 + 3*2^-8 goes up.
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5], dtype=np.float32)
    assert np.frombuffer(bf16(values).data, dtype="<u2").tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020]


def test_markers_are_single_added_tokens_as_in_deepseeks_tokenizer(models: dict[str, Path]) -> None:
    model = models["deepseek"]
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == _config(model)["vocab_size"]
    for marker in MARKERS:
        assert len(tokenizer.encode(marker, add_special_tokens=False).ids) == 1, marker
        ids = tokenizer.encode(f"say {marker} now", add_special_tokens=False).ids
        assert tokenizer.token_to_id(marker) in ids, marker
    added = {t["content"]: t["special"] for t in json.loads((model / "tokenizer.json").read_text())["added_tokens"]}
    # vLLM's parsers read the markers in the detokenized text, which drops special tokens
    assert {m for m in MARKERS if added[m]} == {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"}
    config = _config(model)
    assert tokenizer.id_to_token(config["bos_token_id"]) == "<｜begin▁of▁sentence｜>"
    assert tokenizer.id_to_token(config["eos_token_id"]) == "<｜end▁of▁sentence｜>"
    assert tokenizer.encode("Hello").ids[0] == config["bos_token_id"]


def _render(model: Path, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    # as vLLM renders a chat: the tokenizer's apply_chat_template, without tokenizing
    rendered = AutoTokenizer.from_pretrained(model).apply_chat_template(messages, tokenize=False, **kwargs)
    assert isinstance(rendered, str)
    return rendered


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_chat_template_renders_tool_calls_and_outputs_in_deepseeks_format(models: dict[str, Path]) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                # vLLM hands the template the arguments parsed into a dict
                {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Nice"}}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
    ]
    rendered = _render(models["deepseek"], messages, tools=[WEATHER_TOOL], add_generation_prompt=True)
    system, _, turns = rendered.partition("<｜User｜>")
    assert system.startswith("<｜begin▁of▁sentence｜>Be brief.\n\n## Tools\n")
    assert json.dumps(WEATHER_TOOL) in system
    assert turns == (
        "Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n'
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Nice"}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>rain<｜tool▁output▁end｜><｜tool▁outputs▁end｜></think>"
    )
    calls = TOOL_CALL_REGEX.finditer(turns.split("<｜tool▁outputs▁begin｜>")[0])
    assert [(m["type"], m["function_name"], json.loads(m["function_arguments"])) for m in calls] == [
        ("function", "get_weather", {"city": "Paris"}),
        ("function", "get_weather", {"city": "Nice"}),
    ]


def test_chat_template_thinking_switch_and_reasoning_history(models: dict[str, Path]) -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>greet back</think>Hello!"},
        {"role": "user", "content": "Bye"},
    ]
    model = models["deepseek"]
    history = "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye"
    # off unless asked, as vLLM's deepseek_v3 reasoning parser assumes
    assert _render(model, messages, add_generation_prompt=True) == history + "<｜Assistant｜></think>"
    assert _render(model, messages, add_generation_prompt=True, thinking=True) == history + "<｜Assistant｜><think>\n"
    assert _render(model, messages, add_generation_prompt=True, enable_thinking=True).endswith("<think>\n")
    assert _render(model, messages) == history


def test_same_seed_is_byte_identical_even_in_another_process(models: dict[str, Path], tmp_path: Path) -> None:
    for kind, model in models.items():
        other = tmp_path / kind
        subprocess.run(
            [sys.executable, "-m", "installer.modelmaker", str(other), "--kind", kind],
            check=True,
            capture_output=True,
            env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
            cwd=Path(__file__).resolve().parents[3],
        )
        assert _digests(other) == _digests(model)


def test_other_seed_changes_only_the_weights(models: dict[str, Path], tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "s1", kind="deepseek-fp8", seed=1)
    a, b = _digests(models["deepseek-fp8"]), _digests(other)
    assert {name for name in FILES if a[name] != b[name]} == {"model.safetensors"}
