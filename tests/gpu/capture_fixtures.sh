#!/usr/bin/env bash
# Capture what the unit tests parse, on a machine with an NVIDIA GPU:
#   bash tests/gpu/capture_fixtures.sh DIR
# writes DIR/query.csv (nvidia-smi --query-gpu with doctor.SMI_FIELDS), DIR/q.txt
# (nvidia-smi -q) and DIR/proc_version.txt (/proc/driver/nvidia/version); the unit tests read
# them from tests/unit/fixtures/gpu/h200_r580/.
set -euo pipefail
out=${1:?output directory}
mkdir -p "$out"
fields=$(python3 -c 'import sys; sys.path.insert(0, "."); from installer.gpu.doctor import SMI_FIELDS; print(",".join(SMI_FIELDS))')
nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits > "$out/query.csv"
nvidia-smi -q > "$out/q.txt"
cat /proc/driver/nvidia/version > "$out/proc_version.txt" 2>/dev/null || true
