#!/usr/bin/env bash
# One nvidia-h200-x2 lease for both GPU issues, the steps that need two GPUs done together:
#  1. the multi-GPU checks (tests/gpu/run_on_gpu.sh: topology, NCCL all-reduce over both GPUs,
#     the GPU roles in verify mode, the tuner's placement, pytest -m gpu) while no engine holds
#     a GPU; its captures become tests/unit/fixtures/gpu/h200x2_r580
#  2. side_by_side.sh: engine configs on GPU 0 and GPU 1 at the same time, swapped next round,
#     waiting (GATE) for step 1 while it installs vLLM and writes the model
#
# usage (repo root on the GPU machine, after the staging calls put the wheels in /root/stash,
# the installer's own wheels (.whl) in /root/pliwhl and started gen_model.py):
#   setsid nohup bash benchmarks/h200/lease_x2.sh > /root/lease.log 2>&1 < /dev/null &
# in the last staging call, right away: side_by_side.sh waits for the model itself (gating the
# start on /root/dsv2.done in that call cost the 2026-11-29 lease 520 s of waiting on nothing)
#   bash benchmarks/h200/collect.sh 540     # each call: wait, then tar /root/res to $OUT
# 2026-11-30 (fp8 with tuned tiles against the defaults; later rounds from /root/more_rounds, which
# a collect call may rewrite once the first rounds' figures are in):
#   printf 'Qt16:D\nD:Qt16\n' > /root/more_rounds; TUNE_FP8=1 ROUNDS="Qt:D D:Qt" bash ...lease_x2.sh
set -u
cd "$(dirname "$0")/../.."
REPO=$(pwd) RES=${RES:-/root/res}
mkdir -p "$RES"
(
  # the installer's dependencies (ansible-core, fabric, pydantic 2.14) apart from vLLM's site,
  # which pins pydantic 2.12
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pli-site /root/pliwhl/*.whl
  PYTHONPATH=/tmp/pli-site:$REPO FIXTURE=h200x2_r580 timeout 300 bash tests/gpu/run_on_gpu.sh "$RES/gpu9"
  echo "run_on_gpu exit $?"
  touch "$RES/gpu9.done"
) > "$RES/gpu9.log" 2>&1 &
# TUNE_FP8=1: first tune the Triton fp8 MoE tiles on GPU 1 (tune_moe.py, ~2-3 min) so that config
# Qt can use them; the side-by-side rounds wait for it too (on 2026-11-29 fp8 weights gave
# 1.25-1.28x output tok/s but TTFT p99 11-30% worse: prefill ran on vLLM's default fp8 tiles)
if [ "${TUNE_FP8:-0}" = 1 ]; then
  (
    for i in $(seq 1 300); do [ -d /root/site/vllm ] && [ -f "$RES/gpu9.done" ] && break; sleep 2; done
    CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/root/site:$REPO timeout 480 python3 benchmarks/h200/tune_moe.py \
      "$RES/moe" --dtype fp8_w8a8 --workers 8
    echo "tune_moe exit $?"
    touch "$RES/moe.done"
  ) > "$RES/moe_fp8.log" 2>&1 &
  GATE_FILE=$RES/moe.done
fi
MOE_DIR=$RES/moe GATE=${GATE_FILE:-$RES/gpu9.done} ROUNDS=${ROUNDS:-"D:Q Q:D B:D"} EXTRA_ROUND=${EXTRA_ROUND:-none} \
  RES=$RES bash benchmarks/h200/side_by_side.sh
