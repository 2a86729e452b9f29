#!/usr/bin/env bash
# One device call of the H200 experiment after it was started (experiment.sh): wait until it
# is done or MAX_WAIT seconds passed, print its progress, and pack its results into $OUT.
# usage: bash benchmarks/h200/collect.sh [MAX_WAIT=560]
# The results come back as one archive (a call returns at most 8 files): res_<time>.tgz holds
# /root/res (progress.log, per-run engine logs, bench JSON/text, tuned.json, moe/).
set -u
max=${1:-560} res=${RES:-/root/res} t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt "$max" ] && [ ! -f "$res/DONE" ]; do
  [ -f "$res/FATAL" ] && break
  grep -q FATAL "$res/progress.log" 2>/dev/null && break
  sleep 5
done
cat "$res/progress.log" 2>/dev/null
tar czf "${OUT:-/tmp}/res_$(date +%H%M%S).tgz" -C "$(dirname "$res")" "$(basename "$res")" 2>/dev/null
ls -la "${OUT:-/tmp}"
