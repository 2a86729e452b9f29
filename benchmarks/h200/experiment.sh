#!/usr/bin/env bash
# The H200 tuning experiment: vLLM's defaults against the engine installer/gpu/tuner.py derives,
# both behind our gateway, on the seeds' workload (1024 in / 512 out), alternating in one lease.
#
# usage (repo root on the GPU machine, after stage 1 below):
#   setsid nohup bash benchmarks/h200/experiment.sh > /root/experiment.log 2>&1 < /dev/null &
#   bash benchmarks/h200/collect.sh 560        # each later call: wait, then tar results to $OUT
# dry run (here, no GPU): DRY_RUN=1 bash benchmarks/h200/experiment.sh  (prints every command)
#
# Stage 1, one device call per chunk (../shared/tools/h200-vllm/README.md: fetch_wheels.sh puts
# the wheels in .gpuw/c1..c3 and vLLM in .gpuw/v00..v05; each call carries one or two of them):
#   mkdir -p /root/stash && cp -a .gpuw/cN/. /root/stash/
# plus the cryptography wheel (the gateway's service/tls.py imports it; the GPU image lacks it):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64
#     -d .whl cryptography==50.0.2   here, then   cp .whl/cryptography-*.whl /root/stash/   there
# and in the first call also start the random-weight DeepSeek-V2-Lite-shaped checkpoint
# (gen_model.py of that recipe, copied to .gpuw/tool/):
#   cp .gpuw/tool/gen_model.py /root/ && setsid nohup bash -c 'python3 /root/gen_model.py
#     /root/dsv2 27 > /root/gen.log 2>&1 && touch /root/dsv2.done' < /dev/null > /dev/null 2>&1 &
#
# What it runs (results under $RES, one folder per engine run):
#   setup    install vLLM 0.26 (pip --target /root/site), give the tokenizer word ids
#            (word_vocab.py), start the gateway (python -m service, API key, 127.0.0.1:8080)
#   moe      tune_moe.py: Triton fused-MoE tiles for this GPU, run while the first engine
#            starts (both mostly CPU-bound then; it holds its GPU memory until D1 is ready)
#   D1       vLLM defaults (the recipe's hand-run command: only --max-model-len 4096), cold
#   T1       the tuner's engine (tuned_args.py: flags + env), first start, with the MoE tiles
#            tune_moe.py made (VLLM_TUNED_CONFIG_FOLDER)
#   D2, T2   defaults and the tuner's engine as it derives it (no MoE file), warm restarts
#            (compile caches filled by D1/T1); their restart-to-ready is the cold-start figure
#   M1       T2 + --attention-backend FLASHMLA (the other Hopper MLA decode kernel)
#   Q1       T2 + --quantization fp8 (online fp8 weights), for the record only
#   D3, T3   a third pair while the lease lasts (collect.sh's caller stops by giving back)
# Benchmarks per run: `vllm bench serve` and `installer bench` through the gateway at
# concurrency 64 (256 requests), and in D1/T1 also vllm bench at 8 through the gateway, in D1
# also at 64 straight to the engine (what the gateway costs).
# Afterwards, here: python benchmarks/h200/summarize.py RAW_DIR benchmarks/results/h200_tuning.json
# Device time: staging ~4 min (machine start included), this script ~22 min up to Q1 (D1's cold
# start 4.5 min, each warm restart 1.2-1.5 min, each bench 25-50 s): D3/T3 need a longer budget.
# The engines run as plain processes (no systemd there) with the engine role's cache layout:
# HOME, XDG_CACHE_HOME, VLLM_CACHE_ROOT and the compile caches under one persistent dir.
set -u
cd "$(dirname "$0")/../.."
REPO=$(pwd)
DRY=${DRY_RUN:-0}
BASE=/root; [ "$DRY" = 1 ] && BASE=/tmp/h200dry   # a dry run keeps everything under /tmp
S=$BASE/stash SITE=$BASE/site MODEL=$BASE/dsv2 RES=$BASE/res CACHE=$BASE/pcache GWD=$BASE/gw
GW_PORT=${GW_PORT:-8080} ENG_PORT=${ENG_PORT:-8000}   # a dry run on a shared machine picks others
GW=http://127.0.0.1:$GW_PORT ENG=http://127.0.0.1:$ENG_PORT NAME=dsv2lite
# the environment every process gets (multicast off), log(), engine_env, install_vllm, write_gateway_key
. benchmarks/h200/common.sh
run() { if [ "$DRY" = 1 ]; then echo "DRY: $*"; else "$@"; fi; }


setup() {
  install_vllm || return 1
  python3 benchmarks/h200/word_vocab.py $MODEL | tee -a "$RES/progress.log"
  [ "$DRY" = 1 ] && return 0
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$RES/gpu.csv"
  python3 -c "import vllm, torch, triton; print('vllm', vllm.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" > "$RES/versions.txt"
}

start_gateway() {
  mkdir -p $GWD && chmod 700 $GWD
  write_gateway_key "$GWD"
  cat > $GWD/gateway.yml <<EOF
host: 127.0.0.1
port: $GW_PORT
keys_file: $GWD/keys.json
engines:
  - {name: e0, url: "$ENG", model: $NAME}
limits: {max_in_flight: 512, upstream_timeout_s: 600}
access_log: $GWD/access.log
EOF
  PLI_GATEWAY_CONFIG=$GWD/gateway.yml setsid nohup python3 -m service > "$RES/gateway.log" 2>&1 < /dev/null &
  echo $! > $GWD/pid
  export OPENAI_API_KEY; OPENAI_API_KEY=$(cat $GWD/key)   # read by both benchmark tools
  for i in $(seq 1 30); do curl -sf $GW/livez > /dev/null && { log "gateway up"; return 0; }; sleep 1; done
  log "FATAL: gateway did not start"; return 1
}

# start_engine RUN_NAME "ENV=.. ..." FLAGS...: start vLLM, wait until ready, write ready_s
start_engine() {
  local name=$1 extra_env=$2; shift 2
  mkdir -p "$RES/$name"
  echo "$extra_env $*" > "$RES/$name/command.txt"
  log "$name: starting: $extra_env $*"
  local t0=$(date +%s.%N)
  if [ "$DRY" = 1 ]; then  # the fake OpenAI upstream stands in for vLLM
    echo "DRY: env $(engine_env) $extra_env python3 -m vllm.entrypoints.openai.api_server $*"
    setsid nohup python3 benchmarks/fake_upstream.py --port $ENG_PORT --model $NAME --chunks 64 \
      > "$RES/$name/engine.log" 2>&1 < /dev/null &
  else
  # shellcheck disable=SC2046
  env $(engine_env) $extra_env setsid nohup python3 -m vllm.entrypoints.openai.api_server --model $MODEL \
    --served-model-name $NAME --port $ENG_PORT --host 127.0.0.1 "$@" > "$RES/$name/engine.log" 2>&1 < /dev/null &
  fi
  ENGINE_PID=$!
  for i in $(seq 1 1200); do
    sleep 0.5
    curl -sf $ENG/health > /dev/null && break
    kill -0 $ENGINE_PID 2>/dev/null || { log "$name: engine died"; grep -iE "error|exception" "$RES/$name/engine.log" | tail -5 | tee -a "$RES/progress.log"; return 1; }
  done
  local ready; ready=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
  echo "$ready" > "$RES/$name/ready_s"
  log "$name: ready after ${ready}s"
  # through the gateway: wait for its health check to see the engine, then one short request
  for i in $(seq 1 60); do
    curl -sf -o /dev/null -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' \
      -d "{\"model\":\"$NAME\",\"prompt\":\"t5 t6\",\"max_tokens\":4}" $GW/v1/completions && break
    sleep 0.5
  done
  python3 -c "import time; print(round(time.time() - $t0, 1))" > "$RES/$name/gateway_ready_s"
  log "$name: serving through the gateway after $(cat "$RES/$name/gateway_ready_s")s"
}

stop_engine() {
  [ -n "${ENGINE_PID:-}" ] || return 0
  kill -TERM -- -"$ENGINE_PID" 2>/dev/null
  for i in $(seq 1 60); do kill -0 "$ENGINE_PID" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- -"$ENGINE_PID" 2>/dev/null
  # the GPU's memory is free once no compute process holds it
  [ "$DRY" = 1 ] && { ENGINE_PID=; return 0; }
  for i in $(seq 1 60); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 0.5; done
  ENGINE_PID=
}

# vbench RUN LABEL URL CONCURRENCY: vllm bench serve, random 1024/512, 4 x concurrency prompts
vbench() {
  local name=$1 label=$2 url=$3 c=$4
  log "$name: vllm bench $label"
  run timeout 300 python3 -m vllm.entrypoints.cli.main bench serve --backend vllm \
    --base-url "$url" --model $NAME --tokenizer $MODEL --dataset-name random --random-input-len 1024 \
    --random-output-len 512 --num-prompts $((c * 4)) --max-concurrency "$c" --ignore-eos --seed 0 \
    --save-result --result-dir "$RES/$name" --result-filename "$label.json" > "$RES/$name/$label.txt" 2>&1
  grep -E "Output token throughput|P99 TTFT|Median TTFT" "$RES/$name/$label.txt" | tr -s ' ' | tee -a "$RES/progress.log"
}

# ibench RUN LABEL CONCURRENCY: installer bench through the gateway (chat, 1024 words / 512)
ibench() {
  local name=$1 label=$2 c=$3
  log "$name: installer bench $label"
  timeout 300 python3 benchmarks/h200/installer_bench.py bench --base-url $GW \
    --model $NAME --input-len 1024 --output-len 512 -n $((c * 4)) -c "$c" --json "$RES/$name/$label.json" \
    > "$RES/$name/$label.txt" 2>&1
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' out tok/s %.0f TTFT p50 %.0f p99 %.0f ms, failed %d' % (r['output_tokens_per_s'], r['ttft_ms']['p50'], r['ttft_ms']['p99'], r['failed']))" \
    "$RES/$name/$label.json" 2>&1 | tee -a "$RES/progress.log"
}

full_bench() { vbench "$1" gw_c64 $GW 64; ibench "$1" inst_gw_c64 64; vbench "$1" gw_c8 $GW 8; }
pair_bench() { vbench "$1" gw_c64 $GW 64; ibench "$1" inst_gw_c64 64; }

# engine ARGS of the default run: the recipe's hand-run command
DEFAULT_ARGS=(--max-model-len 4096)

tuned() {  # the tuner's flags and env for this host
  local assume=""; [ "$DRY" = 1 ] && assume="--assume h200"
  python3 benchmarks/h200/tuned_args.py $assume > "$RES/tuned.json" || return 1
  mapfile -t TUNED_ARGS < <(python3 -c "import json; [print(a) for a in json.load(open('$RES/tuned.json'))['args']]")
  TUNED_ENV=$(python3 -c "
import json; env = json.load(open('$RES/tuned.json'))['env']
print(' '.join(f'{k}={v}' for k, v in env.items()))")
  log "tuned: env $TUNED_ENV flags ${TUNED_ARGS[*]}"
}

main() {
  setup || exit 1
  start_gateway || exit 1
  # MoE tiles, while D1 starts cold
  log "moe: tuning"
  ( run timeout 480 python3 benchmarks/h200/tune_moe.py "$RES/moe" --hold-until "$RES/D1/ready_s" > "$RES/moe.log" 2>&1; echo "rc=$?" >> "$RES/moe.log" ) &
  local moe_pid=$!
  start_engine D1 "" "${DEFAULT_ARGS[@]}" || exit 1
  wait $moe_pid
  tail -20 "$RES/moe.log" >> "$RES/progress.log"
  # outside the repo: each device call re-syncs the working tree and removes untracked files
  # there (on 2026-11-29 that took the file away after T1, so T2..Q1 ran without it)
  [ -f "$RES/moe/E=64,N=1408,device_name=NVIDIA_H200.json" ] || log "moe: tuning failed; T1 runs vLLM's default tiles"
  full_bench D1; vbench D1 direct_c64 $ENG 64; stop_engine
  tuned || exit 1
  start_engine T1 "$TUNED_ENV VLLM_TUNED_CONFIG_FOLDER=$RES/moe" "${TUNED_ARGS[@]}" && full_bench T1; stop_engine
  start_engine D2 "" "${DEFAULT_ARGS[@]}" && pair_bench D2; stop_engine
  start_engine T2 "$TUNED_ENV" "${TUNED_ARGS[@]}" && pair_bench T2; stop_engine
  start_engine M1 "$TUNED_ENV" "${TUNED_ARGS[@]}" --attention-backend FLASHMLA && pair_bench M1; stop_engine
  start_engine Q1 "$TUNED_ENV" "${TUNED_ARGS[@]}" --quantization fp8 && pair_bench Q1; stop_engine
  start_engine D3 "" "${DEFAULT_ARGS[@]}" && pair_bench D3; stop_engine
  start_engine T3 "$TUNED_ENV" "${TUNED_ARGS[@]}" && pair_bench T3; stop_engine
  log "DONE"
  touch "$RES/DONE"
  [ "$DRY" = 1 ] && kill -TERM -- -"$(cat $GWD/pid)"
}

main
