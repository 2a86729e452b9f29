"""Does a model fit on some GPUs, and how should vLLM split it?

Memory per GPU, the way vLLM spends it: it may use `gpu_memory_utilization x memory.total`;
from that it loads the weights (its shard of them), profiles one forward pass of
`max_num_batched_tokens` tokens (activations) on top of the CUDA context and NCCL buffers,
and gives everything left to the KV cache. A model *fits* when that KV cache holds at least
one `max_model_len` sequence (vLLM refuses to start otherwise); it serves at *full
concurrency* when it holds `max_num_seqs` such sequences.

Sizes come from the Hugging Face config.json (any dense Llama/Qwen/Mistral-style model,
Mixtral/Qwen-MoE, DeepSeek-V2/V3 with MLA), or from presets of the same form. The unit tests
check the parameter counts against the published ones and the whole estimate against what
vLLM reported for a DeepSeek-V2-Lite-shaped model on this project's H200.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer.base.errors import InstallerError
from installer.gpu.matrix import GENERATIONS, GPUType

GIB = 1024**3

# Bytes per parameter of a checkpoint dtype as vLLM loads it ("auto": fp32 checkpoints are
# served in half precision).
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2, "float8_e4m3fn": 1}

# vLLM's default tokens per scheduler step for its OpenAI server (chunked prefill); the
# activation profile runs one forward pass of this many tokens.
DEFAULT_BATCHED_TOKENS = 8192
# CUDA context, cuBLAS/cuDNN workspaces and torch's own allocations outside the profile
# (about 0.5-1 GiB seen per process), plus NCCL's buffers once there is more than one GPU.
CONTEXT_GIB = 1.0
NCCL_GIB = 0.5


class PlanError(InstallerError):
    """A model description (config.json or preset) that the planner cannot size."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    max_position_embeddings: int
    dtype: str = "bfloat16"
    tie_embeddings: bool = False
    attention_bias: bool = False
    # mixture of experts (0 experts: dense)
    experts: int = 0
    shared_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # Qwen-MoE's shared expert has its own size
    dense_layers: tuple[int, ...] = ()  # indices of layers with a dense MLP in an MoE model
    # multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0: ordinary (GQA) attention
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # checkpoint quantization: "" (none), "fp8", "awq", "gptq"
    quant: str = ""
    quant_bits: int = 16
    quant_group_size: int = 128
    notes: tuple[str, ...] = ()

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.experts > 0

    # ---- parameter counts (the published totals are checked in the unit tests)

    def attention_params(self) -> tuple[int, int]:
        """(sharded, replicated) parameters of one attention block under tensor parallelism."""
        h = self.hidden
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q_sharded = self.q_lora_rank * self.heads * qk
                q_repl = h * self.q_lora_rank + self.q_lora_rank  # q_a_proj + its norm
            else:
                q_sharded, q_repl = h * self.heads * qk, 0
            # kv_a_proj_with_mqa (latent + shared rope key) is replicated on every rank in vLLM
            kv_repl = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = self.heads * self.v_head_dim * h
            return q_sharded + kv_b + o, q_repl + kv_repl
        q = h * self.heads * self.head_dim
        kv = 2 * h * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * h
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.attention_bias else 0
        return q + kv + o + bias, 0

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up, down

    def moe_params(self) -> tuple[int, int]:
        """(all experts incl. shared, router) parameters of one MoE layer."""
        expert = 3 * self.hidden * self.moe_intermediate
        shared = (
            3
            * self.hidden
            * (self.shared_intermediate or self.moe_intermediate * self.shared_experts)
        )
        if self.shared_intermediate:
            shared += self.hidden  # Qwen-MoE's shared-expert gate
        return self.experts * expert + shared, self.experts * self.hidden

    def layer_is_moe(self, i: int) -> bool:
        return self.moe and i not in self.dense_layers

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    def total_params(self) -> int:
        attn_s, attn_r = self.attention_params()
        moe_experts, router = self.moe_params() if self.moe else (0, 0)
        n = self.embedding_params() + self.hidden  # final norm
        for i in range(self.num_layers):
            n += attn_s + attn_r + 2 * self.hidden
            n += moe_experts + router if self.layer_is_moe(i) else self.dense_mlp_params()
        return n

    def active_params(self) -> int:
        """Parameters one token computes with: routed top-k and shared experts of an MoE, and
        not the input embedding (a table lookup), as model cards count "activated" ones."""
        lookup = self.vocab * self.hidden
        if not self.moe:
            return self.total_params() - (0 if self.tie_embeddings else lookup)
        attn_s, attn_r = self.attention_params()
        expert = 3 * self.hidden * self.moe_intermediate
        shared = (
            3
            * self.hidden
            * (self.shared_intermediate or self.moe_intermediate * self.shared_experts)
        )
        n = self.embedding_params() - (0 if self.tie_embeddings else lookup) + self.hidden
        for i in range(self.num_layers):
            n += attn_s + attn_r + 2 * self.hidden
            n += (
                self.experts_per_token * expert + shared + self.experts * self.hidden
                if self.layer_is_moe(i)
                else self.dense_mlp_params()
            )
        return n

    def kv_bytes_per_token(
        self, kv_dtype_bytes: int, tp: int = 1, layers: int | None = None
    ) -> int:
        """KV cache bytes one token takes on one GPU of a TP group (over `layers` layers).

        MLA caches one compressed latent (kv_lora_rank + rope dims) per layer, and vLLM keeps
        the whole latent on every TP rank: more TP does not shrink it. GQA shards the KV heads
        over the ranks (a rank keeps at least one head when tp > kv_heads).
        """
        layers = self.num_layers if layers is None else layers
        if self.mla:
            return layers * (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        heads = max(1, self.kv_heads // tp)
        return 2 * layers * heads * self.head_dim * kv_dtype_bytes

    def valid_tp(self, tp: int) -> bool:
        if self.heads % tp:
            return False
        return self.mla or self.kv_heads % tp == 0 or tp % self.kv_heads == 0


# ------------------------------------------------------------------ config.json


def _quant(cfg: dict[str, Any]) -> tuple[str, int, int]:
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    if not method:
        return "", 16, 128
    if method == "fp8":
        return "fp8", 8, 128
    if method in ("awq", "gptq"):
        return (
            method,
            int(q.get("bits", q.get("w_bit", 4))),
            int(q.get("group_size", q.get("q_group_size", 128))),
        )
    raise PlanError(f"quantization {method!r} is not one the planner sizes (fp8, awq, gptq)")


def from_hf_config(cfg: dict[str, Any], name: str = "") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (as a dict)."""
    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
    try:
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        vocab = int(cfg["vocab_size"])
    except KeyError as exc:
        raise PlanError(f"config.json has no {exc.args[0]!r}; is it a decoder-only LLM?") from None
    mtype = str(cfg.get("model_type", ""))
    quant, bits, group = _quant(cfg)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    notes: list[str] = []
    spec: dict[str, Any] = dict(
        name=name or cfg.get("_name_or_path") or mtype or "model",
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        vocab=vocab,
        intermediate=int(cfg.get("intermediate_size") or 4 * hidden),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
        dtype=dtype if dtype in DTYPE_BYTES else "bfloat16",
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", mtype in ("qwen2", "qwen2_moe"))),
        quant=quant,
        quant_bits=bits,
        quant_group_size=group,
    )
    if cfg.get("kv_lora_rank"):  # DeepSeek-V2/V3 (and models built on them)
        spec.update(
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(cfg["qk_nope_head_dim"]),
            qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
            v_head_dim=int(cfg["v_head_dim"]),
        )
    experts = int(
        cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    )
    if experts:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        freq = int(cfg.get("moe_layer_freq") or cfg.get("decoder_sparse_step") or 1)
        mlp_only = set(cfg.get("mlp_only_layers") or [])
        dense = tuple(i for i in range(layers) if i < first_dense or i % freq or i in mlp_only)
        spec.update(
            experts=experts,
            shared_experts=int(cfg.get("n_shared_experts") or 0),
            experts_per_token=int(cfg.get("num_experts_per_tok") or 2),
            # Mixtral's experts use intermediate_size; DeepSeek/Qwen name the expert size
            moe_intermediate=int(cfg.get("moe_intermediate_size") or spec["intermediate"]),
            shared_intermediate=int(cfg.get("shared_expert_intermediate_size") or 0),
            dense_layers=dense,
        )
    if cfg.get("num_nextn_predict_layers"):
        notes.append(
            f"{cfg['num_nextn_predict_layers']} MTP layer(s) not counted: vLLM loads them "
            "only for MTP speculative decoding"
        )
    if cfg.get("sliding_window") and cfg.get("use_sliding_window"):
        notes.append("sliding-window attention: the KV estimate (full attention) is an upper bound")
    spec["notes"] = tuple(notes)
    return ModelSpec(**spec)


def load_config(path: Path) -> ModelSpec:
    """config.json, or a directory holding one (a model's weights directory)."""
    f = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(f.read_text())
    except OSError as exc:
        raise PlanError(f"cannot read {f}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{f} is not valid JSON: {exc}") from None
    return from_hf_config(cfg, name=(path.name if path.is_dir() else path.parent.name))


# Presets: the published config.json fields of each model (Hugging Face deepseek-ai/*). The
# DeepSeek ones share multi-head latent attention's sizes, MoE on every layer after the dense
# ones, the context and the dtype.
_DEEPSEEK = {
    "moe_layer_freq": 1,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
_DEEPSEEK_V3 = {
    **_DEEPSEEK,
    "model_type": "deepseek_v3",
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "q_lora_rank": 1536,
    "num_nextn_predict_layers": 1,
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}
_QWEN2 = {
    "model_type": "qwen2",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
    "max_position_embeddings": 131072,
}
PRESETS: dict[str, dict[str, Any]] = {
    "deepseek-v2-lite": {
        **_DEEPSEEK,
        "model_type": "deepseek_v2",
        "vocab_size": 102400,
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "n_shared_experts": 2,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "q_lora_rank": None,
    },
    "deepseek-v2.5": {
        **_DEEPSEEK,
        "model_type": "deepseek_v2",
        "vocab_size": 102400,
        "hidden_size": 5120,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_hidden_layers": 60,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_shared_experts": 2,
        "n_routed_experts": 160,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "q_lora_rank": 1536,
    },
    "deepseek-v3": _DEEPSEEK_V3,
    "deepseek-r1": _DEEPSEEK_V3,  # same architecture and FP8 checkpoint layout as V3
    "deepseek-r1-distill-qwen-7b": {  # Qwen2.5-Math-7B
        **_QWEN2,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
    "deepseek-r1-distill-qwen-32b": {  # Qwen2.5-32B
        **_QWEN2,
        "hidden_size": 5120,
        "intermediate_size": 27648,
        "num_hidden_layers": 64,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
    },
    "deepseek-r1-distill-llama-70b": {  # Llama-3.3-70B-Instruct
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}


def preset(name: str) -> ModelSpec:
    key = name.strip().lower().removeprefix("deepseek-ai/")
    key = key if key.startswith("deepseek") else f"deepseek-{key}"
    if key not in PRESETS:
        raise PlanError(f"no preset {name!r}; presets: {', '.join(PRESETS)}")
    return from_hf_config(PRESETS[key], name=key)


# ------------------------------------------------------------------ memory per GPU


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    weights: str = "native"  # "native" (as the checkpoint is) or "fp8" (vLLM quantizes online)
    kv_dtype: str = "auto"  # "auto" (the model's dtype) or "fp8"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def _linear_bytes(spec: ModelSpec, weights: str) -> float:
    """Bytes per parameter of the decoder's linear layers (quantization scales included)."""
    if weights == "fp8" or spec.quant == "fp8":
        return 1 + 4 / (128 * 128)  # e4m3, one fp32 scale per 128x128 block
    if spec.quant in ("awq", "gptq"):
        # packed weights + an fp16 scale and a packed zero point per group
        return spec.quant_bits / 8 + (2 + spec.quant_bits / 8) / spec.quant_group_size
    return DTYPE_BYTES[spec.dtype]


def weights_per_gpu(spec: ModelSpec, layout: Layout) -> float:
    """Bytes of weights on the busiest GPU (the first or last pipeline stage)."""
    lin = _linear_bytes(spec, layout.weights)
    half = DTYPE_BYTES[spec.dtype] if spec.dtype != "float32" else 2
    tp = layout.tp
    attn_s, attn_r = spec.attention_params()
    experts, router = spec.moe_params() if spec.moe else (0, 0)
    per_layer = []
    for i in range(spec.num_layers):
        b = attn_s * lin / tp + attn_r * lin + 2 * spec.hidden * half
        if spec.layer_is_moe(i):
            b += experts * lin / tp + router * half  # the router stays in half precision
        else:
            b += spec.dense_mlp_params() * lin / tp
        per_layer.append(b)
    stages = _stages(spec.num_layers, layout.pp)
    embed = spec.vocab * spec.hidden * half / tp  # embedding and lm_head stay unquantized
    best = 0.0
    for s, (lo, hi) in enumerate(stages):
        b = sum(per_layer[lo:hi])
        if s == 0:
            b += embed
        if s == len(stages) - 1:
            b += (0 if spec.tie_embeddings and layout.pp == 1 else embed) + spec.hidden * half
        best = max(best, b)
    return best


def _stages(layers: int, pp: int) -> list[tuple[int, int]]:
    base, extra = divmod(layers, pp)
    out, lo = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append((lo, lo + n))
        lo += n
    return out


def activation_bytes(
    spec: ModelSpec, layout: Layout, batched_tokens: int, max_num_seqs: int
) -> float:
    """Peak activation of vLLM's profiling forward pass on one GPU (an estimate).

    Layers run one after the other, so the peak is one layer's largest working set: the
    residual stream and norm outputs, the attention projections, and the MLP's gate/up
    output (fused MoE: per routed token copy, 2I + I + hidden), plus fp32 logits for
    `max_num_seqs` sampled tokens over the whole vocabulary.
    """
    t, tp, act = batched_tokens, layout.tp, 2
    stream = t * 4 * spec.hidden * act
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        attn = t * (spec.heads // tp) * (2 * qk + spec.v_head_dim) * act
    else:
        attn = t * (spec.heads + 2 * spec.kv_heads) // tp * spec.head_dim * act
    dense = t * 3 * spec.intermediate // tp * act
    moe = (
        t * spec.experts_per_token * (3 * spec.moe_intermediate // tp + spec.hidden) * act
        if spec.moe
        else 0
    )
    logits = max_num_seqs * spec.vocab * 4
    return stream + attn + max(dense if len(spec.dense_layers) or not spec.moe else 0, moe) + logits


@dataclass
class Fit:
    model: str
    gpu: str
    layout: Layout
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    budget_gib: float
    weights_gib: float
    activation_gib: float
    overhead_gib: float
    kv_gib: float
    kv_bytes_per_token: int  # on one GPU
    kv_tokens: int  # per engine
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.kv_tokens >= self.max_model_len

    @property
    def full_concurrency(self) -> bool:
        return self.kv_tokens >= self.max_model_len * self.max_num_seqs

    @property
    def max_full_len_seqs(self) -> int:
        return self.kv_tokens // self.max_model_len if self.max_model_len else 0

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "tp": self.layout.tp,
            "pp": self.layout.pp,
            "weights": self.layout.weights,
            "kv_cache_dtype": self.layout.kv_dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "budget_gib": round(self.budget_gib, 2),
            "weights_gib": round(self.weights_gib, 2),
            "activation_gib": round(self.activation_gib, 2),
            "overhead_gib": round(self.overhead_gib, 2),
            "kv_gib": round(self.kv_gib, 2),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "fits": self.fits,
            "full_concurrency": self.full_concurrency,
            "notes": self.notes,
        }


def evaluate(
    spec: ModelSpec,
    gpu: GPUType,
    layout: Layout,
    *,
    max_model_len: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
    batched_tokens: int = DEFAULT_BATCHED_TOKENS,
) -> Fit:
    """Memory of one engine laid out as `layout` on GPUs of type `gpu`."""
    half = DTYPE_BYTES[spec.dtype] if spec.dtype != "float32" else 2
    kv_dtype_bytes = 1 if layout.kv_dtype == "fp8" else half
    budget = gpu.memory_mib * 1024**2 * gpu_memory_utilization
    weights = weights_per_gpu(spec, layout)
    act = activation_bytes(spec, layout, batched_tokens, max_num_seqs)
    overhead = (CONTEXT_GIB + (NCCL_GIB if layout.gpus > 1 else 0)) * GIB
    kv = budget - weights - act - overhead
    layers_per_gpu = max(hi - lo for lo, hi in _stages(spec.num_layers, layout.pp))
    per_token = spec.kv_bytes_per_token(kv_dtype_bytes, layout.tp, layers_per_gpu)
    notes = list(spec.notes)
    if max_model_len > spec.max_position_embeddings:
        notes.append(
            f"max_model_len {max_model_len} exceeds the model's "
            f"{spec.max_position_embeddings} positions"
        )
    return Fit(
        model=spec.name,
        gpu=gpu.key,
        layout=layout,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        budget_gib=budget / GIB,
        weights_gib=weights / GIB,
        activation_gib=act / GIB,
        overhead_gib=overhead / GIB,
        kv_gib=kv / GIB,
        kv_bytes_per_token=per_token,
        kv_tokens=max(0, int(kv // per_token)) if kv > 0 else 0,
        notes=notes,
    )


# ------------------------------------------------------------------ recommendation


@dataclass
class Recommendation:
    fit: Fit | None
    engines_per_host: int
    hosts_per_engine: int
    idle_gpus_per_host: int
    verdict: str  # "full concurrency", "fits (reduced concurrency)", "does not fit"
    reasons: list[str]
    missing: str = ""  # what hardware would make it fit
    tried: list[Fit] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "engines_per_host": self.engines_per_host,
            "hosts_per_engine": self.hosts_per_engine,
            "idle_gpus_per_host": self.idle_gpus_per_host,
            "reasons": self.reasons,
            "missing": self.missing,
            "fit": self.fit.summary() if self.fit else None,
        }


def _layouts(
    spec: ModelSpec, gpu: GPUType, gpus_per_host: int, hosts: int, weights: str = "native"
) -> list[Layout]:
    """Candidate layouts, best first: quality (native weights, native KV) before density,
    then as few GPUs per engine as possible (more engines per host serve more requests).
    weights="fp8" (an explicit opt-in for speed): fp8 weights only."""
    fp8_ok = GENERATIONS[gpu.generation].fp8
    weight_opts = ["native"]
    if spec.quant == "" and fp8_ok:
        weight_opts.append("fp8")  # vLLM quantizes bf16/fp16 weights to fp8 at load time
    if weights == "fp8":
        if "fp8" not in weight_opts:
            why = f"the checkpoint is already {spec.quant}" if spec.quant else f"{gpu.name} has no fp8 tensor cores"
            raise PlanError(f"fp8 weights asked for, but {why}")
        weight_opts = ["fp8"]
    kv_opts = ["auto", "fp8"] if fp8_ok else ["auto"]
    tps = [t for t in range(1, gpus_per_host + 1) if gpus_per_host % t == 0 and spec.valid_tp(t)]
    out = []
    for w in weight_opts:
        for kv in kv_opts:
            out += [Layout(tp=t, pp=1, weights=w, kv_dtype=kv) for t in tps]
            # beyond one host: a full host per stage, pipeline-parallel across hosts (Ray)
            out += [
                Layout(tp=tps[-1], pp=p, weights=w, kv_dtype=kv)
                for p in range(2, hosts + 1)
                if p <= spec.num_layers
            ]
    return out


def recommend(
    spec: ModelSpec,
    gpu: GPUType,
    *,
    gpus_per_host: int,
    hosts: int = 1,
    max_model_len: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
    batched_tokens: int = DEFAULT_BATCHED_TOKENS,
    weights: str = "native",
    pipeline_parallel_size: int | None = None,
) -> Recommendation:
    """The best layout of `spec` on `hosts` hosts of `gpus_per_host` GPUs; `pipeline_parallel_size`
    pins the number of hosts one engine spans (gpu.pipeline_parallel_size), else the fewest do."""

    def ev(layout: Layout) -> Fit:
        return evaluate(
            spec,
            gpu,
            layout,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            batched_tokens=batched_tokens,
        )

    layouts = _layouts(spec, gpu, gpus_per_host, hosts, weights)
    if pipeline_parallel_size is not None:
        layouts = [lay for lay in layouts if lay.pp == pipeline_parallel_size]
    tried = [ev(layout) for layout in layouts]
    # quality order first, then fewest GPUs: the first layout at full concurrency wins;
    # else the first that starts at all, with fewer full-length sequences at once
    order = sorted(
        range(len(tried)),
        key=lambda i: (
            tried[i].layout.weights != "native",
            tried[i].layout.kv_dtype != "auto",
            tried[i].layout.gpus,
        ),
    )
    chosen = next((tried[i] for i in order if tried[i].full_concurrency), None)
    verdict = "full concurrency"
    if chosen is None:
        chosen = next((tried[i] for i in order if tried[i].fits), None)
        verdict = "fits (reduced concurrency)"
    if chosen is None:
        return Recommendation(
            None,
            0,
            0,
            gpus_per_host,
            "does not fit",
            [
                f"no layout over {hosts} host(s) of {gpus_per_host} x {gpu.key} "
                f"holds the weights and one {max_model_len}-token sequence"
            ],
            missing=_missing(spec, gpu, gpus_per_host, hosts, ev),
            tried=tried,
        )
    lay = chosen.layout
    engines = gpus_per_host // lay.tp if lay.pp == 1 else 1
    idle = gpus_per_host - engines * lay.tp if lay.pp == 1 else 0
    reasons = [
        f"weights {chosen.weights_gib:.1f} GiB per GPU at TP={lay.tp}"
        + (f", PP={lay.pp} across hosts (Ray)" if lay.pp > 1 else "")
        + (", fp8 online quantization" if lay.weights == "fp8" else "")
        + (", fp8 KV cache" if lay.kv_dtype == "fp8" else ""),
        f"KV cache {chosen.kv_gib:.1f} GiB per GPU = {chosen.kv_tokens:,} tokens per engine "
        f"= {chosen.max_full_len_seqs} sequences of {max_model_len} tokens "
        f"(max_num_seqs {max_num_seqs})",
    ]
    if weights == "fp8":
        reasons.append("fp8 weights asked for (a speed opt-in that changes the model's numerics)")
    elif lay.weights == "fp8" or lay.kv_dtype == "fp8":
        reasons.append("native precision did not reach this concurrency on these GPUs")
    if lay.pp == 1 and engines > 1:
        reasons.append(f"{engines} engines per host, {lay.tp} GPU(s) each")
    if idle:
        reasons.append(f"{idle} GPU(s) per host stay idle (TP must divide the attention heads)")
    if verdict != "full concurrency":
        reasons.append(
            f"only {chosen.max_full_len_seqs} full-length sequences fit at once; lower "
            "max_model_len or max_num_seqs, or add GPUs"
        )
    return Recommendation(chosen, engines, lay.pp, idle, verdict, reasons, tried=tried)


def _missing(spec: ModelSpec, gpu: GPUType, gpus_per_host: int, hosts: int, ev: Any) -> str:
    tp = max(t for t in range(1, gpus_per_host + 1) if gpus_per_host % t == 0 and spec.valid_tp(t))
    for quality in ("native", "fp8"):
        for p in range(hosts + 1, 65):
            lay = Layout(
                tp=tp,
                pp=p,
                weights=quality
                if quality == "native" or (spec.quant == "" and GENERATIONS[gpu.generation].fp8)
                else "native",
            )
            f = ev(lay)
            if f.fits:
                what = "" if lay.weights == "native" else " with fp8 weights"
                return (
                    f"{p} hosts of {gpus_per_host} x {gpu.key}{what} "
                    f"({p * gpus_per_host} GPUs; {p - hosts} more host(s))"
                )
    total = weights_per_gpu(spec, Layout()) / GIB
    return f"the weights alone are {total:.0f} GiB; use larger GPUs or a quantized checkpoint"
