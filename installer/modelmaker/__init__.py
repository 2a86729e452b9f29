"""Tiny random-weight models for the lab: a Llama per task, and a DeepSeek in its own architecture.

No model hub is reachable from an air-gapped lab, so the lab makes its own models. They are written
with `tokenizers`, `safetensors` and `numpy` only (no torch/transformers on the control machine)
and are deterministic: the same seed gives byte-identical files, so bundles that carry them are
cached by content like everything else.

Kinds:
- chat, embed, rerank: 2-layer Llamas, float32, 5.8 MB (installer/modelmaker/llama.py).
- deepseek: `DeepseekV3ForCausalLM` with MLA, MoE and one MTP layer, bf16, and DeepSeek-R1's
  chat template with its reasoning and tool-call markers (installer/modelmaker/deepseek.py).
- deepseek-fp8: the same weights in DeepSeek-V3's fp8 format (float8_e4m3fn weights with a
  float32 `weight_scale_inv` per 128x128 block).

    python -m installer.modelmaker OUT [--kind chat|embed|rerank|deepseek|deepseek-fp8] [--seed N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal, get_args

from installer.modelmaker import deepseek, llama

Kind = Literal["chat", "embed", "rerank", "deepseek", "deepseek-fp8"]
KINDS: tuple[str, ...] = get_args(Kind)


def _write_model(tmp: Path, kind: Kind, seed: int) -> None:
    if kind == "deepseek" or kind == "deepseek-fp8":
        deepseek.write(tmp, quantized=kind == "deepseek-fp8", seed=seed)
    else:
        llama.write(tmp, kind, seed)


def make_tiny_model(out: Path, *, kind: Kind = "chat", seed: int = 0) -> Path:
    """Write the tiny model of `kind` to `out` (replacing it) and return `out`.

    The files are built in a sibling temp dir and renamed into place, so `out` is either absent,
    the previous complete model, or the new complete model -- never half-written.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}: choose one of {', '.join(KINDS)}")
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write_model(tmp, kind, seed)
        # mkdtemp makes 0700 and safetensors writes 0600; the service user must read the model.
        os.chmod(tmp, 0o755)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m installer.modelmaker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out", type=Path, help="directory to write the model to (replaced)")
    parser.add_argument("--kind", choices=KINDS, default="chat", help="which model (default chat)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)
    print(make_tiny_model(args.out, kind=args.kind, seed=args.seed))
    return 0
