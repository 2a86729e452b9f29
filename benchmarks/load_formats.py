"""vLLM's weight load formats side by side on a GPU machine: the default (safetensors through
mmap), `runai_streamer` and `fastsafetensors`, loading one random-weight checkpoint.

    /opt/private-llm/current/venv/bin/python -m benchmarks.load_formats --size-gb 21 --cold

Run it with the engine's own Python (vLLM, torch and safetensors come from there; the two
streaming loaders are installed into it beforehand from their wheels). It writes a Llama-shaped
checkpoint of at least --size-gb (bf16, 5 GB shards, random weights; kept in --dir between runs),
then, --rounds times in a rotating order, starts a fresh vLLM engine (one process per load, eager
mode, no tokenizer) with each format, asks it for 4 tokens, and records:
  - load_s:   vLLM's own "Loading weights took X seconds" (the default loader's, the loader alone;
              runai_streamer's loader does not print it)
  - model_s:  vLLM's "Model loading took ... and X seconds" (loader + model build on the GPU)
  - engine_s: wall time from the process start to the first answer
--cold evicts the checkpoint's files from the page cache before each load (posix_fadvise on
those files only), so the disk is read as on a fresh host; without it the cache is warm.
Medians (min-max) go to benchmarks/results/load_formats-<host>-<time>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.weights_verify import evict

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
FORMATS = ("safetensors", "runai_streamer", "fastsafetensors")
HIDDEN, FFN, HEADS, KV_HEADS, VOCAB = 8192, 28672, 64, 8, 32000
_BF16 = 2

_ENGINE = r"""
import json, sys, time
t0 = float(sys.argv[3])
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], load_format=sys.argv[2], enforce_eager=True, skip_tokenizer_init=True,
          max_model_len=512, gpu_memory_utilization=0.85, seed=0)
out = llm.generate([{"prompt_token_ids": [1, 2, 3, 4]}], SamplingParams(max_tokens=4, detokenize=False))
print("PLI-RESULT " + json.dumps({"engine_s": time.time() - t0, "tokens": list(out[0].outputs[0].token_ids)}))
"""
_LOAD = re.compile(r"Loading weights took ([0-9.]+) seconds")
_MODEL = re.compile(r"Model loading took [0-9.]+ GiB(?: memory)? and ([0-9.]+) seconds")


def layer_tensors(i: int) -> dict[str, tuple[int, ...]]:
    p = f"model.layers.{i}."
    kv = HIDDEN // HEADS * KV_HEADS
    return {
        p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN), p + "self_attn.k_proj.weight": (kv, HIDDEN),
        p + "self_attn.v_proj.weight": (kv, HIDDEN), p + "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        p + "mlp.gate_proj.weight": (FFN, HIDDEN), p + "mlp.up_proj.weight": (FFN, HIDDEN),
        p + "mlp.down_proj.weight": (HIDDEN, FFN),
        p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
    }


def _bytes(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(math.prod(s) for s in shapes.values()) * _BF16


def make_checkpoint(folder: Path, size: int, shard: int) -> list[Path]:
    """A Llama-shaped bf16 checkpoint of at least `size` bytes; kept when its config matches."""
    import torch  # the engine's Python has it; the control side never runs this
    from safetensors.torch import save_file

    outer = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "lm_head.weight": (VOCAB, HIDDEN),
             "model.norm.weight": (HIDDEN,)}
    layers = max(1, math.ceil((size - _bytes(outer)) / _bytes(layer_tensors(0))))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": FFN, "num_hidden_layers": layers, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    }
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / "config.json"
    if marker.exists() and json.loads(marker.read_text()) == config:
        return sorted(folder.glob("*.safetensors"))
    for old in folder.iterdir():
        old.unlink()
    groups: list[dict[str, tuple[int, ...]]] = [dict(outer)]
    for i in range(layers):
        t = layer_tensors(i)
        if _bytes(groups[-1]) + _bytes(t) > shard:
            groups.append({})
        groups[-1].update(t)
    weight_map: dict[str, str] = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n, group in enumerate(groups):
        name = f"model-{n + 1:05d}-of-{len(groups):05d}.safetensors"
        tensors = {k: (torch.randn(s, generator=gen, device="cuda", dtype=torch.bfloat16) * 0.02).cpu()
                   for k, s in group.items()}
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, name))
        print(f"wrote {name}: {_bytes(group) / 1e9:.2f} GB", flush=True)
    total = sum(_bytes(g) for g in groups)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}) + "\n")
    marker.write_text(json.dumps(config) + "\n")  # last: a half-written folder is rebuilt
    return sorted(folder.glob("*.safetensors"))


def load_once(folder: Path, fmt: str, timeout: int) -> dict:
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", _ENGINE, str(folder), fmt, repr(start)],
                          capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + proc.stderr
    result = next((json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
                   if line.startswith("PLI-RESULT ")), None)
    if proc.returncode != 0 or result is None:
        tail = "\n".join(text.splitlines()[-15:])
        return {"ok": False, "error": f"exit {proc.returncode}: {tail}"}
    load, model = _LOAD.search(text), _MODEL.search(text)
    return {"ok": True, "engine_s": round(result["engine_s"], 2), "tokens": result["tokens"],
            "load_s": float(load.group(1)) if load else None, "model_s": float(model.group(1)) if model else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=21.0)
    parser.add_argument("--shard-gb", type=float, default=5.0)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp/pli-load-bench"))
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="evict the checkpoint from the page cache before each load")
    parser.add_argument("--timeout", type=int, default=300, help="seconds one engine may take to answer")
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise SystemExit(f"--formats: unknown {sorted(unknown)}; choose from {', '.join(FORMATS)}")

    t = time.perf_counter()
    shards = make_checkpoint(args.dir, int(args.size_gb * 1e9), int(args.shard_gb * 1e9))
    total = sum(p.stat().st_size for p in shards)
    print(f"checkpoint: {total / 1e9:.2f} GB in {len(shards)} shards ({time.perf_counter() - t:.0f} s)", flush=True)
    runs: dict[str, list[dict]] = {f: [] for f in formats}
    for r in range(args.rounds):
        for fmt in formats[r % len(formats):] + formats[: r % len(formats)]:
            if args.cold:
                evict(shards)
            res = load_once(args.dir, fmt, args.timeout)
            runs[fmt].append(res)
            print(f"round {r + 1} {fmt}: {res}", flush=True)

    def row(fmt: str) -> dict:
        ok = [x for x in runs[fmt] if x["ok"]]
        out: dict = {"ok_runs": len(ok), "runs": runs[fmt]}
        for key in ("load_s", "model_s", "engine_s"):
            vals = [x[key] for x in ok if x.get(key) is not None]
            if vals:
                out[key] = {"median": round(statistics.median(vals), 2), "min": min(vals), "max": max(vals)}
        if "model_s" in out:  # every format has it (runai_streamer's loader does not log load_s)
            out["model_gb_per_s"] = round(total / out["model_s"]["median"] / 1e9, 2)
        return out

    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    report = {"host": platform.node(), "cpus": os.cpu_count(), "size_bytes": total, "shards": len(shards),
              "cold": args.cold, "rounds": args.rounds, "time_utc": stamp, "results": {f: row(f) for f in formats}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    base = RESULTS / f"load_formats-{platform.node()}-{stamp}{'-cold' if args.cold else ''}"
    base.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")

    def cell(x: dict, key: str) -> str:
        v = x.get(key)
        return f"{v['median']} ({v['min']}-{v['max']})" if v else "-"

    lines = [f"# vLLM load formats, {total / 1e9:.1f} GB bf16 in {len(shards)} shards, "
             f"{'page cache cold' if args.cold else 'page cache warm'}, {args.rounds} rounds (medians, min-max)", "",
             "| format | ok | weights load s | model load s | GB/s (model load) | engine to first answer s |",
             "|---|---|---|---|---|---|"]
    for fmt in formats:
        x = report["results"][fmt]
        lines.append(f"| {fmt} | {x['ok_runs']}/{args.rounds} | {cell(x, 'load_s')} | {cell(x, 'model_s')} | "
                     f"{x.get('model_gb_per_s', '-')} | {cell(x, 'engine_s')} |")
    base.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {base}.json")


if __name__ == "__main__":
    main()
