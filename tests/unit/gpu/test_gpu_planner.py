"""Fit planner figures, each with where the expected number comes from."""

import json
from pathlib import Path

import pytest

from installer.gpu import planner
from installer.gpu.matrix import gpu_type
from installer.gpu.planner import GIB, Layout, PlanError, evaluate, preset, recommend

H200, H100, L40S = gpu_type("h200"), gpu_type("h100"), gpu_type("l40s")


# Published sizes (model cards on Hugging Face): total parameters, and "activated" ones for
# the MoE models. Our counts come from config.json alone; 2% covers the cards' rounding.
@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("deepseek-v2-lite", 15.7, 2.4),
        ("deepseek-v2.5", 236, 21),
        ("deepseek-v3", 671, 37),  # 685B on the hub includes the 14B MTP module
        ("deepseek-r1-distill-qwen-7b", 7.62, None),  # Qwen2.5-Math-7B
        ("deepseek-r1-distill-qwen-32b", 32.8, None),  # Qwen2.5-32B
        ("deepseek-r1-distill-llama-70b", 70.6, None),  # Llama-3.3-70B
    ],
)
def test_parameter_counts_match_the_model_cards(
    name: str, total_b: float, active_b: float | None
) -> None:
    spec = preset(name)
    assert spec.total_params() / 1e9 == pytest.approx(total_b, rel=0.02)
    if active_b is not None:
        assert spec.active_params() / 1e9 == pytest.approx(active_b, rel=0.03)


def test_mla_kv_cache_is_the_compressed_latent() -> None:
    # DeepSeek-V3: 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes = 70,272 bytes per token,
    # against 61 x 2 x 128 heads x 128 dims x 2 bytes = 4.0 MB for uncompressed MHA.
    v3 = preset("deepseek-v3")
    assert v3.kv_bytes_per_token(2) == 61 * 576 * 2 == 70272
    # vLLM keeps the whole latent on every TP rank: TP does not shrink it
    assert v3.kv_bytes_per_token(2, tp=8) == 70272
    assert v3.kv_bytes_per_token(1, tp=8) == 35136  # fp8 KV halves it


def test_gqa_kv_cache_shards_over_tp() -> None:
    # Llama-70B: 80 layers x 2 (K,V) x 8 KV heads x 128 dims x 2 bytes = 327,680 bytes per token
    llama = preset("deepseek-r1-distill-llama-70b")
    assert llama.kv_bytes_per_token(2) == 327680
    assert llama.kv_bytes_per_token(2, tp=2) == 163840
    # 8 KV heads over TP=16: each rank still keeps one head
    assert llama.kv_bytes_per_token(2, tp=16) == 2 * 80 * 1 * 128 * 2


def test_v2_lite_on_one_h200_matches_what_vllm_reported() -> None:
    """../shared/tools/h200-vllm/README.md: a DeepSeek-V2-Lite-shaped model on this project's
    H200, vLLM defaults (0.9 utilization), --max-model-len 4096: "KV cache 95 GiB = 3.29 M
    tokens". Weights 15.71B x 2 bytes = 29.3 GiB of the 0.9 x 140.4 GiB = 126.4 GiB budget."""
    fit = evaluate(preset("deepseek-v2-lite"), H200, Layout(), max_model_len=4096, max_num_seqs=256)
    assert fit.budget_gib == pytest.approx(0.9 * 143771 / 1024, rel=1e-6)
    assert fit.weights_gib == pytest.approx(29.26, abs=0.05)
    assert fit.kv_gib == pytest.approx(95.0, rel=0.02)
    assert fit.kv_tokens == pytest.approx(3.29e6, rel=0.02)


def test_deepseek_v3_fp8_fits_one_8x_h200_host() -> None:
    # 671B FP8 weights = 625 GiB (+ bf16 embeddings, block scales) over 8 GPUs = 79.3 GiB each
    r = recommend(preset("deepseek-v3"), H200, gpus_per_host=8, max_model_len=4096, max_num_seqs=64)
    assert r.verdict == "full concurrency"
    lay = r.fit.layout
    assert (lay.tp, lay.pp, lay.weights, lay.kv_dtype) == (8, 1, "native", "auto")
    assert r.fit.weights_gib == pytest.approx(79.3, abs=0.5)
    # 126.4 GiB budget - 79.3 weights - ~3 activations/overhead = ~44 GiB of latent cache
    assert r.fit.kv_gib == pytest.approx(44, abs=1.5)
    assert r.fit.kv_tokens == pytest.approx(44 * GIB / 70272, rel=0.04)


def test_deepseek_v3_needs_two_8x_h100_hosts() -> None:
    # 79.3 GiB of weights per GPU exceeds an H100's 0.9 x 79.6 = 71.7 GiB: one host cannot
    r = recommend(
        preset("deepseek-v3"), H100, gpus_per_host=8, hosts=1, max_model_len=4096, max_num_seqs=64
    )
    assert r.verdict == "does not fit" and r.fit is None
    assert r.missing.startswith("2 hosts of 8 x h100")
    # with the second host: TP=8 inside each host, PP=2 across them
    r2 = recommend(
        preset("deepseek-v3"), H100, gpus_per_host=8, hosts=2, max_model_len=4096, max_num_seqs=64
    )
    assert (r2.fit.layout.tp, r2.fit.layout.pp, r2.hosts_per_engine) == (8, 2, 2)


def test_a_small_model_gets_one_engine_per_gpu() -> None:
    # R1-Distill-Qwen-7B: 15.2 GB of bf16 weights fit one H200 with room for 500 sequences
    r = recommend(
        preset("deepseek-r1-distill-qwen-7b"),
        H200,
        gpus_per_host=8,
        max_model_len=4096,
        max_num_seqs=64,
    )
    assert (r.fit.layout.tp, r.engines_per_host) == (1, 8)


def test_llama_70b_on_h200_takes_two_gpus_per_engine() -> None:
    # 141 GB of bf16 weights: TP=1 cannot (131 GiB > 126 GiB budget), TP=2 holds 65.7 GiB each
    # and 92 sequences of 4096 tokens
    r = recommend(
        preset("deepseek-r1-distill-llama-70b"),
        H200,
        gpus_per_host=8,
        max_model_len=4096,
        max_num_seqs=64,
    )
    assert (r.fit.layout.tp, r.engines_per_host, r.idle_gpus_per_host) == (2, 4, 0)
    assert r.fit.weights_gib == pytest.approx(65.7, abs=0.3)


def test_fp8_kv_only_when_bf16_kv_cannot_hold_the_concurrency() -> None:
    # Qwen-32B on 4 x L40S at 8K x 64 sequences: bf16 KV holds 377K tokens at TP=4, fewer than
    # 524K wanted; fp8 KV doubles it (L40S is Ada: FP8 capable)
    r = recommend(
        preset("deepseek-r1-distill-qwen-32b"),
        L40S,
        gpus_per_host=4,
        max_model_len=8192,
        max_num_seqs=64,
    )
    assert (r.fit.layout.tp, r.fit.layout.kv_dtype, r.fit.layout.weights) == (4, "fp8", "native")
    bf16 = evaluate(
        preset("deepseek-r1-distill-qwen-32b"),
        L40S,
        Layout(tp=4),
        max_model_len=8192,
        max_num_seqs=64,
    )
    assert bf16.fits and not bf16.full_concurrency
    assert r.fit.kv_tokens == pytest.approx(2 * bf16.kv_tokens, rel=0.01)


def test_reduced_concurrency_is_reported_when_nothing_reaches_it() -> None:
    # Llama-70B on 2 x A100-80GB: 65.7 GiB of weights per GPU leave ~3.4 GiB of KV cache
    # (163,840 bytes per token per GPU) = ~22K tokens: one 16K sequence, not 256; and A100 has
    # no FP8 to trade for more
    r = recommend(
        preset("deepseek-r1-distill-llama-70b"),
        gpu_type("a100-80g"),
        gpus_per_host=2,
        max_model_len=16384,
        max_num_seqs=256,
    )
    assert r.verdict == "fits (reduced concurrency)"
    assert r.fit.max_full_len_seqs == 1
    assert any(x.startswith("only 1 full-length") for x in r.reasons)


def test_a_model_larger_than_everything_says_what_is_missing() -> None:
    r = recommend(
        preset("deepseek-v3"),
        gpu_type("l4"),
        gpus_per_host=4,
        hosts=1,
        max_model_len=4096,
        max_num_seqs=16,
    )
    assert r.verdict == "does not fit" and "hosts of 4 x l4" in r.missing


def test_awq_checkpoint_weights_are_a_quarter_of_bf16(tmp_path: Path) -> None:
    cfg = dict(planner.PRESETS["deepseek-r1-distill-qwen-32b"])
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = planner.load_config(tmp_path)
    assert spec.quant == "awq"
    bf16 = planner.weights_per_gpu(preset("deepseek-r1-distill-qwen-32b"), Layout())
    awq = planner.weights_per_gpu(spec, Layout())
    # linear layers at 0.5 + 2.5/128 bytes per parameter; the 1.56B embedding parameters stay bf16
    linear = 32.76e9 - 1.557e9
    assert awq == pytest.approx(linear * (0.5 + 2.5 / 128) + 1.557e9 * 2, rel=0.01)
    assert awq / bf16 == pytest.approx(0.31, abs=0.02)


def test_hf_config_of_a_mixtral_style_moe() -> None:
    cfg = {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    }
    spec = planner.from_hf_config(cfg, "mixtral-8x7b")
    # Mixtral-8x7B: 46.7B total, 12.9B active (Mistral AI's announcement)
    assert spec.total_params() / 1e9 == pytest.approx(46.7, rel=0.01)
    assert spec.active_params() / 1e9 == pytest.approx(12.9, rel=0.02)


def test_bad_configs_are_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no 'hidden_size'"):
        planner.from_hf_config({"num_hidden_layers": 2})
    with pytest.raises(PlanError, match="quantization 'bitsandbytes'"):
        planner.from_hf_config(
            {
                **planner.PRESETS["deepseek-v2-lite"],
                "quantization_config": {"quant_method": "bitsandbytes"},
            }
        )
    with pytest.raises(PlanError, match="cannot read"):
        planner.load_config(tmp_path / "missing")
    with pytest.raises(PlanError, match="no preset"):
        preset("gpt-5")
