#!/usr/bin/env bash
# On the H200 after h200_up.sh served (same lease): `installer bench` through the gateway and
# straight to the engine, side by side (1024 in / 512 out, concurrency 8 and 64, two rounds in
# alternating order), restart-to-ready of the engine unit, and the engine's journal for the cold
# start. JSON reports and logs go under OUT.
#   bash tests/gpu/host/h200_bench.sh STASH OUT
set -uo pipefail
S=$(cd "${1:?STASH}" && pwd); out=${2:?OUT}; mkdir -p "$out"
export PATH=/root/ctl/bin:$PATH INSTALLER_STATE_DIR=/root/pli-state PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# bench's input length is in words: 1024 words make ~2,000 tokens of the tiny lab model's
# vocabulary, past its 2048-token context with 512 out; 480 words made 1,202 tokens there.
INPUT_LEN=${INPUT_LEN:-480}
cd "$S/site"
model=$(python3 -c 'import yaml; print(yaml.safe_load(open("h200.yml"))["model"]["served_name"])')
NS=(nsenter -t "$(pgrep -xf '/lib/systemd/systemd --system' | head -1)" -m -p -u -i -C -r -w)

installer ca export -i h200.yml > "$out/ca.pem"
key=$(installer keys create --name bench -i h200.yml 2>&1 | grep -o 'sk-pli-[A-Za-z0-9_-]*' | head -1)
[ -n "$key" ] || { echo "no key"; exit 2; }

# engine restart to ready (the unit the product deployed; caches warm)
t=$(date +%s.%N)
"${NS[@]}" systemctl restart private-llm-engine.service
for _ in $(seq 600); do curl -sf -o /dev/null http://127.0.0.1:8000/health && break; sleep 0.5; done
python3 -c "print(f'restart_to_ready_s {$(date +%s.%N) - $t:.1f}')" | tee "$out/restart.txt"
# the gateway takes the engine back once its own health checks see it
sleep 6

run() {  # target concurrency round
  local url
  if [ "$1" = gateway ]; then url=https://127.0.0.1:8080/v1; else url=http://127.0.0.1:8000/v1; fi
  SSL_CERT_FILE="$out/ca.pem" OPENAI_API_KEY="$key" installer bench --base-url "$url" --model "$model" \
    --input-len "$INPUT_LEN" --output-len 512 -n $(( $2 * 4 )) -c "$2" --json "$out/bench_$1_c$2_r$3.json" \
    > "$out/bench_$1_c$2_r$3.txt" 2>&1
  echo "$1 c$2 r$3 exit $?: $(grep -iE 'output tok/s|ttft' "$out/bench_$1_c$2_r$3.txt" | tr -s ' ' | head -3 | tr '\n' ' ')"
}
for c in 8 64; do
  run gateway "$c" 1; run direct "$c" 1; run direct "$c" 2; run gateway "$c" 2
done
"${NS[@]}" journalctl -u private-llm-engine.service -o short-unix --no-pager > "$out/engine_journal.txt" 2>&1
"${NS[@]}" nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$out/gpu_memory.txt" 2>&1
installer status -i h200.yml > "$out/status_after.txt" 2>&1; cat "$out/status_after.txt"
