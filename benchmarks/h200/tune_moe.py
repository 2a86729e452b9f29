"""Pick vLLM's Triton fused-MoE tile configs for DeepSeek-V2-Lite's experts on this GPU.

usage: python3 benchmarks/h200/tune_moe.py OUT_DIR [--dtype bf16|fp8_w8a8] [--workers 3]
                                            [--hold-until FILE] [--dry-run]

vLLM 0.26 ships tuned configs for E=64 experts of N=1408 only for the B200; on an H200 it
logs "Using default MoE config. Performance might be sub-optimal!" and runs the generic
heuristic. This writes OUT_DIR/E=64,N=1408,device_name=NVIDIA_H200.json (the name vLLM looks
up in $VLLM_TUNED_CONFIG_FOLDER) and OUT_DIR/moe_tuning.json (time of the default and of the
best config for each batch size, so the file's gain is on record).

Search space: the tile configs vLLM ships for neighbouring shapes (E=64 with N=640..2560 on
the H200/H100/B200, E=128 N=1024 on the H200), about 50, plus the default heuristic's own
config for each batch size; a full grid (~1,000 configs) costs more device time than it
returns. Kernels are compiled first by --workers processes in parallel (Triton compiles on
the CPU and caches to TRITON_CACHE_DIR), then timed in one process, each the minimum over
repeats so that another process on the GPU (an engine starting) only costs repeats.
Shapes: hidden 2048, 64 routed experts of intermediate 1408, top-6, bf16, as in the model;
--dtype fp8_w8a8 times what `--quantization fp8` runs instead (fp8 weights with one scale per
expert, activations quantized per tensor on the fly) and writes the file vLLM looks up for it,
E=64,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8.json: on 2026-11-29 the fp8 engine's prefill
ran slower than bf16's (TTFT p50 0.48-0.67 s vs 0.37-0.39 s side by side) with vLLM's default
tiles for this shape, while vLLM ships tuned fp8 files for E=64 N=320..2560 on the H200.
It times the functional fused_experts call without CUDA graphs: up to ~2,048 tokens that is
mostly Python and launch time (the engine runs decode batches in CUDA graphs), and the
override_config path adds its own, so on 2026-11-30 the fp8 "best" came out slower than the
default at 48 and 1,024 tokens. Read the rows of 4,096 tokens and more; the small rows need
CUDA-graph timing before a file of them is worth shipping.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

E, N, K, TOPK = 64, 1408, 2048, 6
BATCHES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096, 8192]
KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
NEIGHBOURS = (
    "E=64,N=1280,device_name=NVIDIA_H200.json",
    "E=64,N=2560,device_name=NVIDIA_H200.json",
    "E=64,N=640,device_name=NVIDIA_H200.json",
    "E=64,N=1280,device_name=NVIDIA_H100_80GB_HBM3.json",
    "E=64,N=1536,device_name=NVIDIA_H100_80GB_HBM3.json",
    "E=64,N=1408,device_name=NVIDIA_B200.json",
    "E=128,N=1024,device_name=NVIDIA_H200.json",
)
NEIGHBOURS_FP8 = tuple(n.replace(".json", ",dtype=fp8_w8a8.json") for n in NEIGHBOURS)


def out_name(dtype: str) -> str:
    suffix = "" if dtype == "bf16" else f",dtype={dtype}"
    return f"E={E},N={N},device_name=NVIDIA_H200{suffix}.json"


def candidates(config_dir: Path, dtype: str) -> list[dict[str, int]]:
    seen: dict[tuple[int, ...], dict[str, int]] = {}
    for name in NEIGHBOURS if dtype == "bf16" else NEIGHBOURS + NEIGHBOURS_FP8:
        path = config_dir / name
        if not path.is_file():
            print(f"note: {name} not in this vLLM", file=sys.stderr)
            continue
        for batch, cfg in json.loads(path.read_text()).items():
            if batch == "triton_version":
                continue
            key = tuple(int(cfg[k]) for k in KEYS)
            seen.setdefault(key, dict(zip(KEYS, key, strict=True)))
    return list(seen.values())


def _setup(dtype: str):  # type: ignore[no-untyped-def]
    import torch
    from vllm.model_executor.layers.fused_moe import fused_experts, override_config
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
    from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config

    torch.manual_seed(0)
    dev = "cuda"
    w1 = torch.randn(E, 2 * N, K, device=dev, dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(E, K, N, device=dev, dtype=torch.bfloat16) * 0.02
    w1_bf16, w2_bf16 = w1, w2
    quant = None
    if dtype == "fp8_w8a8":  # as vLLM's online fp8 stores them: fp8 weights, a scale per expert
        fp8 = torch.float8_e4m3fn
        s1 = w1.abs().amax(dim=(1, 2)).float() / torch.finfo(fp8).max
        s2 = w2.abs().amax(dim=(1, 2)).float() / torch.finfo(fp8).max
        w1 = (w1 / s1[:, None, None]).to(fp8)
        w2 = (w2 / s2[:, None, None]).to(fp8)
        quant = fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2)  # activations: dynamic
    inputs = {}
    for m in BATCHES:
        x = torch.randn(m, K, device=dev, dtype=torch.bfloat16)
        logits = torch.randn(m, E, device=dev, dtype=torch.float32)
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), TOPK, dim=-1)
        inputs[m] = (x, weights, ids.to(torch.int32))

    def run(m: int, cfg: dict[str, int] | None) -> None:
        x, weights, ids = inputs[m]
        if cfg is None:  # no override and no tuned file: vLLM's default heuristic
            fused_experts(x, w1, w2, weights, ids, quant_config=quant)
        else:
            with override_config(dict(cfg, SPLIT_K=1)):
                fused_experts(x, w1, w2, weights, ids, quant_config=quant)

    def default(m: int) -> dict[str, int]:
        cfg = get_default_config(m, E, N, K, TOPK, None if dtype == "bf16" else dtype)
        return {k: int(cfg[k]) for k in KEYS if k in cfg}

    def run_bf16(m: int) -> None:  # the bf16 engine's MoE at this size (vLLM's default tiles)
        x, weights, ids = inputs[m]
        fused_experts(x, w1_bf16, w2_bf16, weights, ids)

    return torch, run, default, run_bf16


def _compile(cands: list[dict[str, int]], dtype: str) -> list[int]:
    """Run each config once at every batch size (compiles and caches its kernels); returns
    the indices that failed (too much shared memory, say)."""
    torch, run, _, _ = _setup(dtype)
    bad = []
    for i, cfg in enumerate(cands):
        try:
            for m in BATCHES:
                run(m, cfg)
            torch.cuda.synchronize()
        except Exception as exc:  # Triton's OutOfResources and kin
            print(f"config {cfg} failed: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
            bad.append(i)
    return bad


def _compile_slice(args: tuple[list[dict[str, int]], list[int], str]) -> list[int]:
    cands, idx, dtype = args
    failed = _compile([cands[i] for i in idx], dtype)
    return [idx[j] for j in failed]


def time_us(torch, fn, reps: int = 5, calls: int = 8) -> float:  # type: ignore[no-untyped-def]
    fn()
    fn()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1000 / calls)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=("bf16", "fp8_w8a8"), default="bf16")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="list the candidates and stop")
    ap.add_argument("--hold-until", help="keep the GPU memory held until this file exists")
    ap.add_argument("--hold-max-s", type=float, default=400)
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import vllm.model_executor.layers.fused_moe as fm

    cands = candidates(Path(fm.__file__).parent / "configs", a.dtype)
    print(f"{len(cands)} candidate configs, {len(BATCHES)} batch sizes")
    if a.dry_run:
        return
    t0 = time.time()
    slices = [list(range(i, len(cands), a.workers)) for i in range(a.workers)]
    # The pool lives until the end: its workers' GPU memory must not be freed while an engine
    # beside us profiles its memory (vLLM stops when free memory grows under its profile).
    pool = mp.get_context("spawn").Pool(a.workers)
    bad = sorted(i for part in pool.map(_compile_slice, [(cands, s, a.dtype) for s in slices]) for i in part)
    compile_s = time.time() - t0
    good = [c for i, c in enumerate(cands) if i not in bad]
    print(f"compiled in {compile_s:.0f}s; {len(bad)} configs failed")
    torch, run, default, run_bf16 = _setup(a.dtype)
    report: dict[str, object] = {
        "shape": {"E": E, "N": N, "K": K, "topk": TOPK, "dtype": a.dtype},
        "device": torch.cuda.get_device_name(),
        "candidates": len(cands),
        "failed": len(bad),
        "compile_s": round(compile_s, 1),
        "batches": {},
    }
    best_cfgs: dict[str, dict[str, int]] = {}
    for m in BATCHES:
        t_default = time_us(torch, lambda m=m: run(m, None))
        # fp8: the bf16 engine's MoE too, so the file says whether fp8 experts are slower at
        # prefill sizes (as the fp8 engine's TTFT was) or faster, with and without tuned tiles
        t_bf16 = time_us(torch, lambda m=m: run_bf16(m)) if a.dtype != "bf16" else None
        timed = []
        for cfg in [*good, default(m)]:
            try:
                timed.append((time_us(torch, lambda m=m, cfg=cfg: run(m, cfg)), cfg))
            except Exception:  # a config that only fails at this size
                continue
        timed.sort(key=lambda t: t[0])
        best_us, best = timed[0]
        best_cfgs[str(m)] = best
        report["batches"][str(m)] = {  # type: ignore[index]
            "default_us": round(t_default, 1),
            "best_us": round(best_us, 1),
            "speedup": round(t_default / best_us, 3),
            "best": best,
            "default": default(m),
            "top3": [[round(t, 1), c] for t, c in timed[:3]],
        }
        bf16 = ""
        if t_bf16 is not None:
            report["batches"][str(m)]["bf16_default_us"] = round(t_bf16, 1)  # type: ignore[index]
            bf16 = f", bf16 {t_bf16:8.1f} us"
        print(
            f"M={m:5d}: default {t_default:8.1f} us, best {best_us:8.1f} us ({t_default / best_us:.2f}x){bf16} {best}",
            flush=True,
        )
    (out / out_name(a.dtype)).write_text(json.dumps(best_cfgs, indent=1))
    report["total_s"] = round(time.time() - t0, 1)
    (out / "moe_tuning.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / out_name(a.dtype)} in {time.time() - t0:.0f}s", flush=True)
    if a.hold_until:
        for _ in range(int(a.hold_max_s)):
            if Path(a.hold_until).exists():
                break
            time.sleep(1)
    pool.close()
    pool.join()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    main()
