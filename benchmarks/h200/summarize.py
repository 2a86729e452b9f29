"""Summarize one H200 experiment (experiment.sh's results folder) into a results JSON.

usage: python benchmarks/h200/summarize.py RAW_DIR OUT_JSON

Reads each run's bench JSONs (`vllm bench serve` and `installer bench`), ready times and the
engine log's start-up phases, and writes per-run figures plus the ratios the issue asks for:
tuned / default output tok/s at concurrency 64 through the gateway (each tuned run against the
mean of the default runs of the same lease) and TTFT p99 side by side.
"""

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

# the engine log lines that time its start-up phases
PHASES = {
    "weights_s": r"Loading weights took ([\d.]+) seconds",
    "model_load_s": r"Model loading took [\d.]+ GiB and ([\d.]+) seconds",
    "graph_capture_s": r"Graph capturing finished in (\d+) secs",
    "graph_gib": r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB",
    "engine_init_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "compile_s": r"\(compilation: ([\d.]+) s\)",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
}
FACTS = {
    "attention_backend": r"Using (?:AttentionBackendEnum\.)?(\w+)(?: attention)? backend",
    "moe_config": r"(Using configuration from \S+|Using default MoE config)",
}


def _vllm(path: Path) -> dict[str, Any]:
    d = json.loads(path.read_text())
    return {
        "tool": "vllm bench serve",
        "completed": d["completed"],
        "output_tok_s": round(d["output_throughput"], 1),
        "ttft_ms": {"p50": round(d["median_ttft_ms"], 1), "p99": round(d["p99_ttft_ms"], 1)},
        "tpot_ms_p50": round(d["median_tpot_ms"], 2),
        "duration_s": round(d["duration"], 1),
    }


def _installer(path: Path) -> dict[str, Any]:
    d = json.loads(path.read_text())
    return {
        "tool": "installer bench",
        "completed": d["completed"],
        "failed": d["failed"],
        "output_tok_s": round(d["output_tokens_per_s"], 1),
        "ttft_ms": {"p50": round(d["ttft_ms"]["p50"], 1), "p99": round(d["ttft_ms"]["p99"], 1)},
        "tpot_ms_p50": round(d["tpot_ms"]["p50"], 2),
        "duration_s": round(d["duration_s"], 1),
        "mean_prompt_tokens": round(d["mean_prompt_tokens"], 1),
    }


def run_summary(d: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"command": (d / "command.txt").read_text().strip()}
    for name in ("ready_s", "gateway_ready_s"):
        if (d / name).is_file():
            out[name] = float((d / name).read_text())
    log = (d / "engine.log").read_text(errors="replace") if (d / "engine.log").is_file() else ""
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)
    phases: dict[str, Any] = {}
    for key, pat in PHASES.items():
        m = re.search(pat, log)
        if m:
            phases[key] = float(m[1].replace(",", ""))
    out["startup"] = phases
    for key, pat in FACTS.items():
        m = re.search(pat, log)
        if m:
            out[key] = m[1]
    benches = {}
    for f in sorted(d.glob("*.json")):
        benches[f.stem] = _installer(f) if f.stem.startswith("inst") else _vllm(f)
    out["bench"] = benches
    return out


def main(raw: str, out_path: str) -> None:
    root = Path(raw)
    runs = {d.name: run_summary(d) for d in sorted(root.iterdir()) if (d / "command.txt").is_file()}
    defaults = [r for n, r in runs.items() if n.startswith("D")]
    ratios: dict[str, Any] = {}
    for label in ("gw_c64", "inst_gw_c64"):
        base = [r["bench"][label] for r in defaults if label in r["bench"]]
        if not base:
            continue
        tok = statistics.mean(b["output_tok_s"] for b in base)
        p99 = statistics.mean(b["ttft_ms"]["p99"] for b in base)
        ratios[label] = {
            "default_mean_output_tok_s": round(tok, 1),
            "default_mean_ttft_p99_ms": round(p99, 1),
            "vs_default_mean": {
                n: {
                    "output_tok_s_ratio": round(r["bench"][label]["output_tok_s"] / tok, 3),
                    "ttft_p99_ms": r["bench"][label]["ttft_ms"]["p99"],
                }
                for n, r in runs.items()
                if not n.startswith("D") and label in r["bench"]
            },
        }
    result = {
        "what": "vLLM defaults vs the tuner's engine on one H200, DeepSeek-V2-Lite-shaped random-weight "
        "model, 1024 in / 512 out, through the gateway (see benchmarks/h200/experiment.sh)",
        "versions": (root / "versions.txt").read_text().strip() if (root / "versions.txt").is_file() else "",
        "gpu": (root / "gpu.csv").read_text().strip().splitlines()[-1] if (root / "gpu.csv").is_file() else "",
        "runs": runs,
        "ratios_c64": ratios,
    }
    if (root / "notes.json").is_file():  # what the run's numbers alone do not say
        result["notes"] = json.loads((root / "notes.json").read_text())
    moe = root / "moe" / "moe_tuning.json"
    if moe.is_file():
        m = json.loads(moe.read_text())
        result["moe_tuning"] = {
            "shape": m["shape"],
            "candidates": m["candidates"],
            # default_us is timed first for each size; where the default heuristic's own config is
            # among the three best of the loop, its time there is the fairer baseline
            "by_batch": {
                k: {
                    **{x: v[x] for x in ("default_us", "best_us", "speedup")},
                    "default_config_in_loop_us": next((t for t, c in v["top3"] if c == v["default"]), None),
                }
                for k, v in m["batches"].items()
            },
        }
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["ratios_c64"], indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
