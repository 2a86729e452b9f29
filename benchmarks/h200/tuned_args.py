"""Print, as JSON, the engine that installer/gpu/tuner.py derives for DeepSeek-V2-Lite here.

usage: python3 benchmarks/h200/tuned_args.py [--assume h200] [--max-model-len 4096]

On the GPU machine the host is read as `installer doctor` reads it (nvidia-smi, NUMA nodes);
--assume describes one GPU of a catalogue type instead (for a dry run without a GPU).
Output: {"args": [...vLLM flags...], "env": {...}, "settings": {...}, "why": {...}} of the
first engine, which experiment.sh starts as the "tuned" engine.
"""

import argparse
import json

from installer.gpu import doctor
from installer.gpu.matrix import gpu_type
from installer.gpu.planner import preset
from installer.gpu.tuner import HostHardware, tune


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--assume", help="a GPU type from the catalogue instead of this host's")
    ap.add_argument("--max-model-len", type=int, default=4096)
    a = ap.parse_args()
    if a.assume:
        hw = HostHardware.of_type("assumed", gpu_type(a.assume), 1)
    else:
        hw = HostHardware.from_facts(doctor.facts())
    t = tune(preset("deepseek-v2-lite"), [hw], concurrency=64, max_model_len=a.max_model_len)
    e = t.engines[0]
    print(json.dumps({"args": e.args, "env": e.env, "settings": t.settings, "why": t.why}))


if __name__ == "__main__":
    main()
