"""Summarize a side-by-side run (side_by_side.sh's results folder) into a results JSON.

usage: python benchmarks/h200/summarize_sbs.py RAW_DIR OUT_JSON

Each round ran two engines at once, one per GPU (folders R<round>_gpu<g>_<config>; on one GPU,
R<round>_a_/_b_ one after the other). For every round that paired a candidate with vLLM's
defaults (config D) it writes the candidate / default ratio of output tok/s and both TTFT p99s,
per benchmark tool; then per candidate the median over its rounds (with the GPUs swapped between
rounds, a GPU's own difference cancels). Rounds of two equal configs would give the noise floor.
"""

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from summarize import run_summary

LABELS = ("gw_c64", "inst_gw_c64", "inst_direct_c64", "prefill_c64")
_DIR = re.compile(r"R(\d+)_(gpu\d|a|b)_(\w+)$")


def main(raw: str, out_path: str) -> None:
    root = Path(raw)
    runs: dict[str, Any] = {}
    rounds: dict[int, dict[str, str]] = {}
    for d in sorted(root.iterdir(), key=lambda p: (len(p.name), p.name)):
        m = _DIR.match(d.name)
        if not m or not (d / "command.txt").is_file():
            continue
        r = run_summary(d)
        r["bench"].pop("warmup", None)
        r.update(round=int(m[1]), slot=m[2], config=m[3])
        runs[d.name] = r
        rounds.setdefault(int(m[1]), {})[m[3]] = d.name
    pairs: list[dict[str, Any]] = []
    for n, members in sorted(rounds.items()):
        if "D" not in members or len(members) != 2:
            continue
        (cand,) = [c for c in members if c != "D"]
        base, other = runs[members["D"]], runs[members[cand]]
        row: dict[str, Any] = {"round": n, "candidate": cand, "candidate_on": other["slot"]}
        for label in sorted({*base["bench"], *other["bench"]}):
            b, o = base["bench"].get(label), other["bench"].get(label)
            if not b or not o:
                continue
            row[label] = {
                "output_tok_s_ratio": round(o["output_tok_s"] / b["output_tok_s"], 3),
                "output_tok_s": [b["output_tok_s"], o["output_tok_s"]],
                "ttft_p99_ms": [b["ttft_ms"]["p99"], o["ttft_ms"]["p99"]],
                "ttft_p50_ms": [b["ttft_ms"]["p50"], o["ttft_ms"]["p50"]],
                "tpot_ms_p50": [b["tpot_ms_p50"], o["tpot_ms_p50"]],
            }
        pairs.append(row)
    by_candidate: dict[str, Any] = {}
    for cand in sorted({p["candidate"] for p in pairs}):
        mine = [p for p in pairs if p["candidate"] == cand]
        summary: dict[str, Any] = {"rounds": [p["round"] for p in mine]}
        for label in LABELS + tuple(k for p in mine for k in p if k.startswith("inst_gw") and k not in LABELS):
            vals = [p[label] for p in mine if label in p]
            if not vals or label in summary:
                continue
            summary[label] = {
                "median_output_tok_s_ratio": round(statistics.median(v["output_tok_s_ratio"] for v in vals), 3),
                "ratios": [v["output_tok_s_ratio"] for v in vals],
                "median_ttft_p99_ms_default_vs_candidate": [
                    round(statistics.median(v["ttft_p99_ms"][i] for v in vals), 1) for i in (0, 1)
                ],
                "median_ttft_p50_ms_default_vs_candidate": [
                    round(statistics.median(v["ttft_p50_ms"][i] for v in vals), 1) for i in (0, 1)
                ],
            }
        by_candidate[cand] = summary
    # every candidate run against the mean of the lease's default runs (the measure of a SERIAL
    # lease, where a round's two engines ran one after the other, and of rounds without D)
    vs_mean: dict[str, Any] = {}
    for label in LABELS[:2]:
        base = [r["bench"][label] for r in runs.values() if r["config"] == "D" and label in r["bench"]]
        if not base:
            continue
        tok = statistics.mean(b["output_tok_s"] for b in base)
        vs_mean[label] = {
            "default_runs": len(base),
            "default_mean_output_tok_s": round(tok, 1),
            "default_ttft_p99_ms": [b["ttft_ms"]["p99"] for b in base],
            "candidates": {},
        }
        for cand in sorted({r["config"] for r in runs.values()} - {"D"}):
            mine = [r["bench"][label] for r in runs.values() if r["config"] == cand and label in r["bench"]]
            if mine:
                vs_mean[label]["candidates"][cand] = {
                    "output_tok_s_ratios": [round(b["output_tok_s"] / tok, 3) for b in mine],
                    "median_ratio": round(statistics.median(b["output_tok_s"] / tok for b in mine), 3),
                    "ttft_p99_ms": [b["ttft_ms"]["p99"] for b in mine],
                }
    result = {
        "what": (
            "one GPU (side_by_side.sh SERIAL=1): each round's two configs one after the other on GPU 0"
            if any(r["slot"] in ("a", "b") for r in runs.values())
            else "side by side on two GPUs of one host: each round's two configs at the same time, one per "
            "GPU, each behind its own gateway with its own load client, GPUs swapped between rounds"
        )
        + "; benchmarks/h200/side_by_side.sh, vLLM defaults (D) against candidates, DeepSeek-V2-Lite-shaped "
        "random-weight model, 1024 in / 512 out, concurrency 64, 256 requests, through the gateway",
        "versions": (root / "versions.txt").read_text().strip() if (root / "versions.txt").is_file() else "",
        "gpus": (root / "gpu.csv").read_text().strip().splitlines()[1:] if (root / "gpu.csv").is_file() else [],
        "runs": runs,
        "pairs": pairs,
        "by_candidate": by_candidate,
        "vs_default_mean": vs_mean,
    }
    if (root / "notes.json").is_file():
        result["notes"] = json.loads((root / "notes.json").read_text())
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(vs_mean, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
