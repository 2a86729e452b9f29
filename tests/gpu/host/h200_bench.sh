#!/usr/bin/env bash
# On the H200 after h200_up.sh served (same lease): `installer bench` through the gateway and
# straight to the engine, side by side (1024 in / 512 out, concurrency 8 and 64, two rounds in
# alternating order), restart-to-ready of the engine unit, and the engine's journal for the cold
# start. Each run also records the CPU seconds the bench client, the gateway unit and the engine
# unit spent (cgroup cpu.stat), to tell a relay cost from a client limit. Then, when WORKERS is
# set, a second `installer up` with that many gateway processes and the concurrency-64 rounds
# again. JSON reports and logs go under OUT.
#   bash tests/gpu/host/h200_bench.sh STASH OUT
set -uo pipefail
S=$(cd "${1:?STASH}" && pwd); out=${2:?OUT}; mkdir -p "$out"
export PATH=/root/ctl/bin:$PATH INSTALLER_STATE_DIR=/root/pli-state PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# bench's input length is in words, about a token each for a real tokenizer; the tiny lab model's
# 512-token vocabulary splits them finer (480 words made 1,202 tokens), so 410 words make about
# 1,024 of its tokens. The reports give the measured prompt tokens.
INPUT_LEN=${INPUT_LEN:-410}
cd "$S/site"
model=$(python3 -c 'import yaml; print(yaml.safe_load(open("h200.yml"))["model"]["served_name"])')
NS=(nsenter -t "$(pgrep -xf '/lib/systemd/systemd --system' | head -1)" -m -p -u -i -C -r -w)

installer ca export -i h200.yml > "$out/ca.pem"
key=$(installer keys create --name "bench-$(date +%s)" -i h200.yml 2>&1 | grep -o 'sk-pli-[A-Za-z0-9_-]*' | head -1)
[ -n "$key" ] || { echo "no key"; exit 2; }

# engine restart to ready (the unit the product deployed; caches warm). Only a run that restarts
# writes restart.txt, with the unit's process before and after (a LONG_ONLY run once wrote 0.0).
if [ -z "${LONG_ONLY:-}" ]; then
  pid0=$("${NS[@]}" systemctl show -p MainPID --value private-llm-engine.service)
  t=$(date +%s.%N)
  "${NS[@]}" systemctl restart private-llm-engine.service
  for _ in $(seq 600); do curl -sf -o /dev/null http://127.0.0.1:8000/health && break; sleep 0.5; done
  pid1=$("${NS[@]}" systemctl show -p MainPID --value private-llm-engine.service)
  python3 -c "print(f'restart_to_ready_s {$(date +%s.%N) - $t:.1f} main_pid $pid0 -> $pid1')" | tee "$out/restart.txt"
  # the gateway takes the engine back once its own health checks see it
  sleep 6
fi
# vLLM's speculative-decoding counters before the runs (MTP's drafts and accepted tokens)
curl -s http://127.0.0.1:8000/metrics | grep -E '^vllm:spec_decode' > "$out/spec_before.txt" || true

cpu() {  # CPU seconds a unit has used so far
  "${NS[@]}" awk '/^usage_usec/ {printf "%.2f", $2 / 1e6}' "/sys/fs/cgroup/system.slice/$1.service/cpu.stat"
}
run() {  # target concurrency round
  local url name="$1_c$2_r$3" g0 e0 rc
  if [ "$1" = gateway ]; then url=https://127.0.0.1:8080/v1; else url=http://127.0.0.1:8000/v1; fi
  g0=$(cpu private-llm-gateway); e0=$(cpu private-llm-engine)
  TIMEFORMAT='client_cpu_s %U user %S sys %R wall'
  { time SSL_CERT_FILE="$out/ca.pem" OPENAI_API_KEY="$key" installer bench --base-url "$url" --model "$model" \
    --input-len "$INPUT_LEN" --output-len 512 -n $(( $2 * ${PER_SLOT:-4} )) -c "$2" --json "$out/bench_$name.json" \
    > "$out/bench_$name.txt" 2>&1; } 2> "$out/cpu_$name.txt"
  rc=$?
  echo "gateway_cpu_s $(python3 -c "print(round($(cpu private-llm-gateway) - $g0, 2))")" >> "$out/cpu_$name.txt"
  echo "engine_cpu_s $(python3 -c "print(round($(cpu private-llm-engine) - $e0, 2))")" >> "$out/cpu_$name.txt"
  echo "$name exit $rc: $(grep -iE 'output tok/s|ttft' "$out/bench_$name.txt" | tr -s ' ' | head -3 | tr '\n' ' ') | $(tr '\n' ' ' < "$out/cpu_$name.txt")"
}
if [ -z "${LONG_ONLY:-}" ]; then
for c in 8 64; do
  run gateway "$c" 1; run direct "$c" 1; run direct "$c" 2; run gateway "$c" 2
done
else
  # longer runs (PER_SLOT requests per concurrency slot), alternated, on the deployment as it is
  for r in 1 2 3; do run direct 64 "long$r"; run gateway 64 "long$r"; done
  for r in 1 2; do run gateway 8 "long$r"; run direct 8 "long$r"; done
fi
if [ -n "${WORKERS:-}" ] && [ -z "${LONG_ONLY:-}" ]; then
  # the same deployment with more gateway processes: a second `up`, which changes only the gateway
  python3 - "$WORKERS" <<'PY'
import sys, yaml
inv = yaml.safe_load(open("h200.yml"))
inv.setdefault("gateway", {})["workers"] = int(sys.argv[1])
yaml.safe_dump(inv, open(f"h200_w{sys.argv[1]}.yml", "w"), sort_keys=False)
PY
  installer up -i "h200_w$WORKERS.yml" --bundle /root/bundle.tar --trusted-key ./bundle-signing.pub \
    > "$out/up_w$WORKERS.log" 2>&1
  echo "up with $WORKERS gateway workers exit $?: $(tail -3 "$out/up_w$WORKERS.log" | tr '\n' ' ')"
  sleep 6
  run gateway 64 "w${WORKERS}r1"; run direct 64 "w${WORKERS}r1"; run direct 64 "w${WORKERS}r2"; run gateway 64 "w${WORKERS}r2"
fi
curl -s http://127.0.0.1:8000/metrics | grep -E '^vllm:spec_decode' > "$out/spec_after.txt" || true
"${NS[@]}" journalctl -u private-llm-engine.service -o short-unix --no-pager > "$out/engine_journal.txt" 2>&1
"${NS[@]}" nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$out/gpu_memory.txt" 2>&1
installer status -i h200.yml > "$out/status_after.txt" 2>&1; cat "$out/status_after.txt"
