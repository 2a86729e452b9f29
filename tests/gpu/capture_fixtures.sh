#!/usr/bin/env bash
# Capture what the unit tests parse, on a machine with an NVIDIA GPU:
#   bash tests/gpu/capture_fixtures.sh DIR
# writes DIR/query.csv (nvidia-smi --query-gpu with doctor.SMI_FIELDS), DIR/q.txt
# (nvidia-smi -q), DIR/topo_m.txt (nvidia-smi topo -m: the GPU link matrix and NUMA affinity),
# DIR/nvlink_s.txt (nvidia-smi nvlink -s: each NVLink's speed) and DIR/proc_version.txt
# (/proc/driver/nvidia/version); the unit tests read them from tests/unit/fixtures/gpu/<name>/.
set -euo pipefail
out=${1:?output directory}
mkdir -p "$out"
fields=$(python3 -c 'import sys; sys.path.insert(0, "."); from installer.gpu.doctor import SMI_FIELDS; print(",".join(SMI_FIELDS))')
nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits > "$out/query.csv"
nvidia-smi -q > "$out/q.txt"
cat /proc/driver/nvidia/version > "$out/proc_version.txt" 2>/dev/null || true
nvidia-smi topo -m > "$out/topo_m.txt" 2>&1 || true
nvidia-smi nvlink -s > "$out/nvlink_s.txt" 2>&1 || true
