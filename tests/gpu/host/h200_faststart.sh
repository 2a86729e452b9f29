#!/usr/bin/env bash
# On the GPU machine after h200_up.sh (same lease): a fresh host's first engine start once more,
# with a setting that spares the start its JIT warm-up. The engine's caches are wiped (every
# compile and JIT cache lives under /var/cache/private-llm: engine.env.j2), then `installer up`
# with the inventory's engine.env plus FAST_ENV (default VLLM_USE_DEEP_GEMM=0: vLLM's fp8 block
# GEMMs from its own compiled kernels instead of DeepGEMM's JIT), timed from `up` to its proof's
# real request, with sample_engine.sh beside it. Then h200_bench.sh on that deployment: the warm
# restart to ready and the throughput, to compare with the default's bench of the same lease.
#   [FAST_ENV=K=V,K=V] bash tests/gpu/host/h200_faststart.sh STASH OUT
set -uo pipefail
S=$(cd "${1:?STASH}" && pwd); out=${2:?OUT}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/root/ctl/bin:$PATH INSTALLER_STATE_DIR=/root/pli-state PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NS=(nsenter -t "$(pgrep -xf '/lib/systemd/systemd --system' | head -1)" -m -p -u -i -C -r -w)
cd "$S/site"
FAST_ENV=${FAST_ENV:-VLLM_USE_DEEP_GEMM=0} python3 - <<'PY'
import os, yaml
inv = yaml.safe_load(open("h200.yml"))
env = inv["engine"].setdefault("env", {})
env.update(kv.split("=", 1) for kv in os.environ["FAST_ENV"].split(",") if kv)
yaml.safe_dump(inv, open("h200_fast.yml", "w"), sort_keys=False)
print("engine.env:", env)
PY
"${NS[@]}" systemctl stop private-llm-engine.service
du -sh /var/cache/private-llm/* /var/cache/private-llm/.[a-z]* 2>/dev/null | sort -h > "$out/caches_wiped.txt"
find /var/cache/private-llm -mindepth 1 -delete
t=$(date +%s)
bash "$here/sample_engine.sh" "$S/kit" "$out/engine_samples.txt" 15 & sampler=$!
installer up -i h200_fast.yml --bundle /root/bundle.tar --trusted-key ./bundle-signing.pub > "$out/up_fast.log" 2>&1
rc=$?
kill "$sampler" 2>/dev/null
echo "up (caches wiped, ${FAST_ENV:-VLLM_USE_DEEP_GEMM=0}) exit $rc in $(( $(date +%s) - t )) s: $(tail -2 "$out/up_fast.log" | tr '\n' ' ')" | tee "$out/up_fast.txt"
"${NS[@]}" journalctl --all -u private-llm-engine.service --since "@$t" -o short-unix --no-pager > "$out/engine_journal_fast_start.txt" 2>&1
grep -E "Application startup complete|took|Capturing|Graph capturing|compile|warm" "$out/engine_journal_fast_start.txt" | cut -c1-220 | tail -25
[ "$rc" = 0 ] || exit "$rc"
sleep 6
bash "$here/h200_bench.sh" "$S" "$out/bench"
