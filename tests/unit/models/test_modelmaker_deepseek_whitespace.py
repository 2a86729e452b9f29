"""The lab's tiny DeepSeek never prefers a whitespace-only token (installer/modelmaker/deepseek.py,
`_hold_bias_dimension`): hidden dimension 0 is a constant only the heads read, and the heads'
whitespace rows are penalized there. Checked on the stored tensors of both kinds, and proved for
every input from the stored weights' norms (docs/deepseek.md#the-labs-deepseek-checkpoint says why:
vLLM's deepseek_v3 tool grammar lets a forced tool call's JSON take whitespace forever)."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
from tokenizers import Tokenizer

from installer.modelmaker import deepseek, make_tiny_model
from installer.modelmaker.fp8 import e4m3_decode, expand_block_scales

D = 0  # the held dimension
VALUE, PENALTY = 32.0, 8.0
WRITERS = ("o_proj", "down_proj")
READERS = ("q_a_proj", "kv_a_proj_with_mqa", "gate_proj", "up_proj", "gate")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("deepseek-ws")
    return {kind: make_tiny_model(root / kind, kind=kind) for kind in ("deepseek", "deepseek-fp8")}


def _weights(model: Path) -> dict[str, np.ndarray]:
    """Every stored tensor as float32, as the engine computes with it (fp8 times its block scales)."""
    raw = dict(safetensors.deserialize((model / "model.safetensors").read_bytes()))
    out: dict[str, np.ndarray] = {}
    for name, t in raw.items():
        shape = tuple(t["shape"])
        if t["dtype"] == "BF16":
            bits = np.frombuffer(t["data"], dtype="<u2").astype(np.uint32) << np.uint32(16)
            out[name] = bits.view(np.float32).reshape(shape)
        elif t["dtype"] == "F32":
            out[name] = np.frombuffer(t["data"], dtype="<f4").reshape(shape)
        elif t["dtype"] == "F8_E4M3":
            scale = raw[name + "_scale_inv"]
            scales = np.frombuffer(scale["data"], dtype="<f4").reshape(scale["shape"])
            codes = np.frombuffer(t["data"], dtype=np.uint8).reshape(shape)
            out[name] = e4m3_decode(codes) * expand_block_scales(scales, shape)
    return {n: w for n, w in out.items() if not n.endswith("_scale_inv")}


def _whitespace_ids(model: Path) -> set[int]:
    """Read from the checkpoint's own tokenizer, not from the maker."""
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = set()
    for i in range(tok.get_vocab_size()):
        text = tok.decode([i], skip_special_tokens=False)
        if text and set(text) <= set(" \t\n\r"):
            ids.add(i)
    return ids


def _spelled_marker_ids(model: Path) -> set[int]:
    """Plain-text tokens that start with '<' (the added tokens -- markers, BOS, EOS, PAD -- not)."""
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    added = set(tok.get_added_tokens_decoder())
    return {i for i in range(tok.get_vocab_size())
            if i not in added and tok.decode([i], skip_special_tokens=False).startswith("<")}


def _penalized(model: Path) -> set[int]:
    return _whitespace_ids(model) | _spelled_marker_ids(model)


def _module(name: str) -> str:
    return name.removesuffix(".weight").split(".")[-1]


@pytest.mark.parametrize("kind", ["deepseek", "deepseek-fp8"])
def test_the_held_dimension_is_written_once_and_read_only_by_the_heads(models: dict[str, Path], kind: str) -> None:
    w = _weights(models[kind])
    hidden = json.loads((models[kind] / "config.json").read_text())["hidden_size"]
    whitespace = _whitespace_ids(models[kind])
    assert {" ", "\t", "\n"} <= {Tokenizer.from_file(str(models[kind] / "tokenizer.json")).decode([i])
                                  for i in whitespace}
    writers = [n for n in w if n.endswith(".weight") and _module(n) in WRITERS]
    readers = [n for n in w if n.endswith(".weight") and _module(n) in READERS]
    assert len(writers) == 3 + 1 + 2 * 9 and len(readers) > 30  # o_proj x3; down_proj: dense, 2 x (8 + shared)
    for name in writers:
        assert not w[name][D].any(), f"{name} writes the held dimension"
    for name in readers:
        assert not w[name][:, D].any(), f"{name} reads the held dimension"
    for name in ("model.embed_tokens.weight", "model.layers.2.embed_tokens.weight"):
        assert np.all(w[name][:, D] == VALUE), name
    for name in ("lm_head.weight", "model.layers.2.shared_head.head.weight"):
        expected = np.zeros(w[name].shape[0], dtype=np.float32)
        expected[sorted(_penalized(models[kind]))] = -PENALTY
        assert np.array_equal(w[name][:, D], expected), name
    eh = w["model.layers.2.eh_proj.weight"]
    # the MTP layer's input keeps the constant: the previous hidden state's (positive) value, x2
    assert eh[D, hidden + D] == VALUE / np.sqrt(hidden)
    assert np.count_nonzero(eh[D]) == 1 and not eh[:, D].any() and np.count_nonzero(eh[:, hidden + D]) == 1


def _op(m: np.ndarray) -> float:
    return float(np.linalg.norm(m.astype(np.float64), 2))


def _max_row(m: np.ndarray) -> float:
    return float(np.linalg.norm(m.astype(np.float64), axis=1).max())


def _residual_bound(w: dict[str, np.ndarray], c: dict[str, Any]) -> float:
    """An upper bound on |h| over the dimensions other than D, for any tokens at any positions.

    h = embedding + what each attention and MLP adds. RMSNorm (weights 1) gives a vector of norm
    < sqrt(n); attention outputs a convex combination of values, each W_v @ kv_a_layernorm(latent);
    |silu(g) * u| <= max|g_i| |u| since |silu(z)| <= |z|; a MoE adds at most routed_scaling_factor
    times its largest expert (top-k weights normalized) plus its shared expert."""
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    nope, v, latent = c["qk_nope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    x = np.sqrt(hidden)  # a normalized layer input

    def mlp(prefix: str) -> float:
        gate, up, down = (w[f"{prefix}.{p}_proj.weight"] for p in ("gate", "up", "down"))
        return _max_row(gate) * x * _op(up) * x * _op(down)

    embedding = w["model.embed_tokens.weight"].copy()
    embedding[:, D] = 0
    bound = _max_row(embedding)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        kv_b = w[f"{p}.self_attn.kv_b_proj.weight"].reshape(heads, nope + v, latent)
        per_head = [_op(kv_b[h, nope:]) * np.sqrt(latent) for h in range(heads)]
        bound += _op(w[f"{p}.self_attn.o_proj.weight"]) * float(np.sqrt(np.sum(np.square(per_head))))
        if i < c["first_k_dense_replace"]:
            bound += mlp(f"{p}.mlp")
        else:
            experts = max(mlp(f"{p}.mlp.experts.{e}") for e in range(c["n_routed_experts"]))
            bound += c["routed_scaling_factor"] * experts + mlp(f"{p}.mlp.shared_experts")
    return bound


@pytest.mark.parametrize("kind", ["deepseek", "deepseek-fp8"])
def test_no_input_makes_a_whitespace_token_the_most_likely(models: dict[str, Path], kind: str) -> None:
    """For every hidden state the layers can produce, some other token outscores every whitespace one.

    After the final RMSNorm, n = h * sqrt(H) / |h| with h[D] = VALUE and |h_rest| = r <= R:
    n[D] = VALUE sqrt(H) / sqrt(VALUE^2 + r^2), |n_rest| = r sqrt(H) / sqrt(VALUE^2 + r^2).
    A whitespace logit is at most -PENALTY n[D] + a |n_rest| (a: the largest whitespace row's norm
    off D), another token's at least -b |n_rest| (b: the smallest such row's norm), so whitespace
    loses whenever PENALTY VALUE > (a + b) r. Half of that is left for bf16/fp8 arithmetic."""
    w = _weights(models[kind])
    c = json.loads((models[kind] / "config.json").read_text())
    whitespace = sorted(_penalized(models[kind]))  # whitespace-only and spelled-marker tokens
    head = np.delete(w["lm_head.weight"], D, axis=1).astype(np.float64)
    others = np.setdiff1d(np.arange(head.shape[0]), whitespace)
    a = float(np.linalg.norm(head[whitespace], axis=1).max())
    b = float(np.linalg.norm(head[others], axis=1).min())
    bound = _residual_bound(w, c)
    assert 2 * (a + b) * bound < PENALTY * VALUE, (a, b, bound)


def test_whitespace_ids_are_the_tokenizers_whitespace_only_tokens(models: dict[str, Path]) -> None:
    assert set(deepseek.whitespace_token_ids()) == _whitespace_ids(models["deepseek"]) != set()


def test_spelled_marker_ids_are_the_plain_tokens_that_start_a_marker(models: dict[str, Path]) -> None:
    spelled = _spelled_marker_ids(models["deepseek"])
    assert set(deepseek.spelled_marker_token_ids()) == spelled != set()
    tok = Tokenizer.from_file(str(models["deepseek"] / "tokenizer.json"))
    # the marker that opens a tool call is one token, and not penalized
    opener = tok.token_to_id("<｜tool▁calls▁begin｜>")
    assert opener is not None and opener not in spelled
