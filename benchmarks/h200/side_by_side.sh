#!/usr/bin/env bash
# Side-by-side engine comparison on a two-GPU machine (the device tool's nvidia-h200-x2): in each
# round one engine config runs on GPU 0 and another on GPU 1 AT THE SAME TIME, each behind its
# own gateway and driven by its own load client; the next round swaps the GPUs, so a GPU's (or a
# moment's) difference cancels in the per-pair ratio. Workload: the seeds' 1024 tokens in / 512
# out at concurrency 64 (256 requests), vLLM 0.26, the random-weight DeepSeek-V2-Lite-shaped model.
#
# usage (repo root on the GPU machine, after experiment.sh's stage 1 put the wheels and the model
# in /root/stash and /root/dsv2):
#   setsid nohup bash benchmarks/h200/side_by_side.sh > /root/sbs.log 2>&1 < /dev/null &
#   bash benchmarks/h200/collect.sh 560        # each later call: wait, then tar /root/res to $OUT
# dry run (here, no GPU; fake upstreams stand in for vLLM): DRY_RUN=1 bash benchmarks/h200/side_by_side.sh
# Afterwards, here: python benchmarks/h200/summarize_sbs.py RAW_DIR benchmarks/results/h200_side_by_side.json
#
# Configs (each a vLLM command line; the tuner's comes from installer/gpu/tuner.py via tuned_args.py):
#   D  vLLM's defaults, the recipe's hand-run command (only --max-model-len 4096)
#   A  the tuner's engine + --max-num-batched-tokens 16384 (the c64 burst prefills 64 x 1024
#      tokens: 4 scheduler steps instead of 8) + --stream-interval 8 (8 tokens per streamed chunk
#      after the first: a gateway and vLLM's API server do per-chunk work; the first token is
#      never held back, so TTFT is not delayed)
#   F  A + --quantization fp8 (online per-tensor fp8 weights: an opt-in, it changes numerics)
#   B  the tuner's engine + --moe-backend flashinfer_cutlass (FlashInfer's CUTLASS bf16 MoE
#      instead of Triton; vLLM's own oracle ranks it below Triton on SM90: measured, not trusted)
#   Q  the tuner's engine with engine.quantization fp8, exactly as tune(quantization="fp8")
#      derives it (F without the two A extras, which were inside the noise)
#   Qt Q with Triton fp8 MoE tiles tuned for this shape on this GPU (tune_moe.py --dtype fp8_w8a8,
#      written to $MOE_DIR before the rounds; lease_x2.sh TUNE_FP8=1 does it)
#   Qt16 Qt + --max-num-batched-tokens 16384 (the c64 burst's 64 x 1024 prompt tokens in 4 steps
#      instead of 8: fewer of the fp8 engine's slower prefill steps)
# ROUNDS lists "slot0:slot1" pairs (SERIAL=1 on one GPU: run one after the other); the default measures A and F against D, each twice (swapped).
# After them, pairs are taken one line at a time from $BASE/more_rounds while it has any: a device
# call can choose the next rounds from the figures of the first ones while the script runs.
# Round extras: EXTRA_ROUND (default 2) also benches each engine directly (no gateway) and, when
# GW_WORKERS > 1, through a gateway of that many workers.
# The engines share one persistent compile cache (the engine role's layout), so each config's
# first start is cold and later ones are the warm restart the cold-start goal is about.
set -u
cd "$(dirname "$0")/../.."
REPO=$(pwd)
DRY=${DRY_RUN:-0}
BASE=/root; [ "$DRY" = 1 ] && BASE=/tmp/sbsdry
S=$BASE/stash SITE=$BASE/site MODEL=$BASE/dsv2 RES=${RES:-$BASE/res} CACHE=$BASE/pcache
NAME=dsv2lite
ROUNDS=${ROUNDS:-"D:A A:D F:D D:F B:D"}
EXTRA_ROUND=${EXTRA_ROUND:-2}
GW_WORKERS=${GW_WORKERS:-1}
# SERIAL=1 (a one-GPU machine): each pair's configs run one after the other on GPU 0 instead of
# side by side; the pairs still alternate which config goes first.
SERIAL=${SERIAL:-0}
ENG_BASE=${ENG_BASE:-8000} GW_BASE=${GW_BASE:-8080}
# tuned MoE tile files (config Qt); outside the repo: each device call re-syncs the working tree
MOE_DIR=${MOE_DIR:-$BASE/moe}
# the environment every process gets (multicast off), log(), engine_env, install_vllm, write_gateway_key
. benchmarks/h200/common.sh


setup() {
  install_vllm || return 1
  [ -f $BASE/vocab.done ] || { python3 benchmarks/h200/word_vocab.py $MODEL | tee -a "$RES/progress.log" && touch $BASE/vocab.done; }
  # one tuned engine for this host: its flags and env, less the GPU pinning (each slot sets its own)
  local assume=""; [ "$DRY" = 1 ] && assume="--assume h200"
  python3 benchmarks/h200/tuned_args.py $assume > "$RES/tuned.json" || { log "FATAL: tuner"; return 1; }
  mapfile -t TUNED_ARGS < <(python3 -c "import json; [print(a) for a in json.load(open('$RES/tuned.json'))['args']]")
  TUNED_ENV=$(python3 -c "
import json; env = json.load(open('$RES/tuned.json'))['env']
print(' '.join(f'{k}={v}' for k, v in env.items() if k != 'CUDA_VISIBLE_DEVICES'))")
  log "tuned: env $TUNED_ENV flags ${TUNED_ARGS[*]}"
  [ "$DRY" = 1 ] && return 0
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm,pci.bus_id --format=csv > "$RES/gpu.csv"
  python3 -c "import vllm, torch, triton; print('vllm', vllm.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" > "$RES/versions.txt"
}

# config NAME -> CFG_ENV (string) and CFG_ARGS (array)
config() {
  CFG_ENV="" CFG_ARGS=()
  local a=("${TUNED_ARGS[@]}" --max-num-batched-tokens 16384 --stream-interval 8)
  case $1 in
    D) CFG_ARGS=(--max-model-len 4096) ;;
    T) CFG_ENV=$TUNED_ENV CFG_ARGS=("${TUNED_ARGS[@]}") ;;
    A) CFG_ENV=$TUNED_ENV CFG_ARGS=("${a[@]}") ;;
    F) CFG_ENV=$TUNED_ENV CFG_ARGS=("${a[@]}" --quantization fp8) ;;
    B) CFG_ENV=$TUNED_ENV CFG_ARGS=("${TUNED_ARGS[@]}" --moe-backend flashinfer_cutlass) ;;
    Q) CFG_ENV=$TUNED_ENV CFG_ARGS=("${TUNED_ARGS[@]}" --quantization fp8) ;;
    Qt) CFG_ENV="$TUNED_ENV VLLM_TUNED_CONFIG_FOLDER=$MOE_DIR" CFG_ARGS=("${TUNED_ARGS[@]}" --quantization fp8) ;;
    Qt16) CFG_ENV="$TUNED_ENV VLLM_TUNED_CONFIG_FOLDER=$MOE_DIR"
      CFG_ARGS=("${TUNED_ARGS[@]}" --quantization fp8 --max-num-batched-tokens 16384) ;;
    *) log "FATAL: unknown config $1"; return 1 ;;
  esac
}

# gateway SLOT WORKERS: (re)start slot's gateway in front of slot's engine
gateway() {
  local slot=$1 workers=$2 d=$BASE/gw$1 port=$((GW_BASE + $1))
  [ -f "$d/pid" ] && { kill -TERM -- -"$(cat "$d/pid")" 2>/dev/null; sleep 1; }
  mkdir -p "$d" && chmod 700 "$d"
  write_gateway_key "$d"
  cat > "$d/gateway.yml" <<EOF
host: 127.0.0.1
port: $port
keys_file: $d/keys.json
engines:
  - {name: e$slot, url: "http://127.0.0.1:$((ENG_BASE + slot))", model: $NAME}
limits: {max_in_flight: 512, upstream_timeout_s: 600}
access_log: $d/access.log
EOF
  PLI_GATEWAY_WORKERS=$workers PLI_GATEWAY_CONFIG=$d/gateway.yml setsid nohup python3 -m service \
    > "$RES/gateway$slot-w$workers.log" 2>&1 < /dev/null &
  echo $! > "$d/pid"
  for i in $(seq 1 40); do curl -sf "http://127.0.0.1:$port/livez" > /dev/null && return 0; sleep 0.5; done
  log "FATAL: gateway $slot ($workers workers) did not start"; return 1
}

# start SLOT CONFIG DIR: start the config's engine on GPU SLOT; ENGINE_PID_<slot>
start() {
  local slot=$1 cfg=$2 dir=$3 port=$((ENG_BASE + $1)) gpu=$1
  [ "$SERIAL" = 1 ] && gpu=0
  config "$cfg" || return 1
  mkdir -p "$dir"
  echo "CUDA_VISIBLE_DEVICES=$gpu $CFG_ENV ${CFG_ARGS[*]}" > "$dir/command.txt"
  date +%s.%N > "$dir/t0"
  if [ "$DRY" = 1 ]; then
    echo "DRY: env $(engine_env) CUDA_VISIBLE_DEVICES=$gpu $CFG_ENV python3 -m vllm.entrypoints.openai.api_server --model $MODEL ${CFG_ARGS[*]}" > "$dir/engine.log"
    setsid nohup python3 benchmarks/fake_upstream.py --port $port --model $NAME --chunks 64 \
      >> "$dir/engine.log" 2>&1 < /dev/null &
  else
    # shellcheck disable=SC2046
    env $(engine_env) CUDA_VISIBLE_DEVICES=$gpu $CFG_ENV setsid nohup python3 -m vllm.entrypoints.openai.api_server \
      --model $MODEL --served-model-name $NAME --port $port --host 127.0.0.1 "${CFG_ARGS[@]}" \
      > "$dir/engine.log" 2>&1 < /dev/null &
  fi
  echo $! > "$dir/pid"
}

# ready SLOT DIR: wait for the engine, then for its gateway to route a request; writes ready_s
ready() {
  local slot=$1 dir=$2 pid; pid=$(cat "$dir/pid")
  local eng=http://127.0.0.1:$((ENG_BASE + slot))
  for i in $(seq 1 1200); do
    curl -sf "$eng/health" > /dev/null && break
    kill -0 "$pid" 2>/dev/null || { log "$dir: engine died"; grep -iE "error|exception" "$dir/engine.log" | tail -5 | tee -a "$RES/progress.log"; return 1; }
    sleep 0.5
  done
  python3 -c "import time; print(round(time.time() - $(cat "$dir/t0"), 1))" > "$dir/ready_s"
  routed "$slot"
  log "$(basename "$dir"): ready after $(cat "$dir/ready_s")s"
}

routed() {  # routed SLOT: wait until slot's gateway sees its engine and relays a request
  local gw=http://127.0.0.1:$((GW_BASE + $1)) key; key=$(cat $BASE/gw$1/key)
  for i in $(seq 1 120); do
    curl -sf -o /dev/null -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
      -d "{\"model\":\"$NAME\",\"prompt\":\"t5 t6\",\"max_tokens\":4}" "$gw/v1/completions" && return 0
    sleep 0.5
  done
  log "gateway $1 does not relay"; return 1
}

stop() {  # stop SLOT DIR
  local pid; pid=$(cat "$2/pid" 2>/dev/null) || return 0
  kill -TERM -- -"$pid" 2>/dev/null
  for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- -"$pid" 2>/dev/null
  [ "$DRY" = 1 ] && return 0
  local gpu=$1; [ "$SERIAL" = 1 ] && gpu=0
  for i in $(seq 1 60); do
    [ -z "$(nvidia-smi -i "$gpu" --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 0.5
  done
}

# seed SLOT LABEL: a prompt seed per benchmark run, so that no run repeats an earlier run's
# prompts on the same engine (vLLM's prefix cache would skip their prefill: on 2026-11-29 the
# repeated installer bench runs of R2_b_D did); the same label gives both configs the same prompts
seed() { echo $(( $(printf '%s' "$2" | cksum | cut -d' ' -f1) % 100000 )); }

# vbench SLOT DIR LABEL URL PROMPTS OUT_LEN: vllm bench serve at concurrency 64, random ids
vbench() {
  local slot=$1 dir=$2 label=$3 url=$4 n=$5 olen=$6
  if [ "$DRY" = 1 ]; then  # no vLLM here: installer bench stands in, same URL and key
    OPENAI_API_KEY=$(cat $BASE/gw$slot/key) python3 benchmarks/h200/installer_bench.py bench --base-url "$url" \
      --model $NAME --input-len 64 --output-len 64 -n "$n" -c 64 --json "$dir/$label.i.json" > "$dir/$label.txt" 2>&1
    echo "DRY: vllm bench serve --base-url $url --num-prompts $n --random-output-len $olen" >> "$dir/$label.txt"
    return
  fi
  OPENAI_API_KEY=$(cat $BASE/gw$slot/key) timeout 300 python3 -m vllm.entrypoints.cli.main bench serve \
    --backend vllm --base-url "$url" --model $NAME --tokenizer $MODEL --dataset-name random \
    --random-input-len 1024 --random-output-len "$olen" --num-prompts "$n" --max-concurrency 64 \
    --ignore-eos --seed "$(seed "$slot" "$label")" --save-result --result-dir "$dir" --result-filename "$label.json" \
    > "$dir/$label.txt" 2>&1
}

# ibench SLOT DIR LABEL URL: installer bench (chat, 1024 words in / 512 out) at concurrency 64
ibench() {
  local slot=$1 dir=$2 label=$3 url=$4
  local n=256; [ "$DRY" = 1 ] && n=64
  OPENAI_API_KEY=$(cat $BASE/gw$slot/key) timeout 300 python3 benchmarks/h200/installer_bench.py bench \
    --base-url "$url" --model $NAME --input-len 1024 --output-len 512 -n $n -c 64 --seed "$(seed "$slot" "$label")" \
    --json "$dir/$label.json" > "$dir/$label.txt" 2>&1
}

show() {  # show DIR LABEL: one line per result
  local f=$1/$2.json
  [ -f "$f" ] || { log "$(basename "$1") $2: no result"; return; }
  python3 - "$f" "$(basename "$1") $2" <<'EOF' | tee -a "$RES/progress.log"
import json, sys
r, label = json.load(open(sys.argv[1])), sys.argv[2]
if "output_throughput" in r:
    print(f"   {label}: {r['output_throughput']:.0f} tok/s, TTFT p50 {r['median_ttft_ms']:.0f} p99 {r['p99_ttft_ms']:.0f} ms, TPOT {r['median_tpot_ms']:.2f} ms, done {r['completed']}")
else:
    print(f"   {label}: {r['output_tokens_per_s']:.0f} tok/s, TTFT p50 {r['ttft_ms']['p50']:.0f} p99 {r['ttft_ms']['p99']:.0f} ms, failed {r['failed']}")
EOF
}

# both SLOT0_DIR SLOT1_DIR FUNCTION LABEL URL_KIND [args]: run one benchmark on both slots at once
both() {
  local d0=$1 d1=$2 fn=$3 label=$4 kind=$5; shift 5
  local u0 u1
  if [ "$kind" = gw ]; then u0=http://127.0.0.1:$GW_BASE u1=http://127.0.0.1:$((GW_BASE + 1))
  else u0=http://127.0.0.1:$ENG_BASE u1=http://127.0.0.1:$((ENG_BASE + 1)); fi
  if [ -z "$d1" ]; then "$fn" 0 "$d0" "$label" "$u0" "$@"; [ "$label" = warmup ] || show "$d0" "$label"; return; fi
  if [ -z "$d0" ]; then "$fn" 1 "$d1" "$label" "$u1" "$@"; [ "$label" = warmup ] || show "$d1" "$label"; return; fi
  "$fn" 0 "$d0" "$label" "$u0" "$@" & local p0=$!
  "$fn" 1 "$d1" "$label" "$u1" "$@" & local p1=$!
  wait $p0 $p1
  [ "$label" = warmup ] || { show "$d0" "$label"; show "$d1" "$label"; }
}

# measure R D0 D1: the benchmarks of one round on the engines of D0 (slot 0) and D1 (slot 1);
# either may be "" (SERIAL: one engine at a time)
measure() {
  local r=$1 d0=$2 d1=$3
  # a warm-up load first: Triton JIT-compiles some MoE/attention shapes at their first use
  # (the engine logs "JIT compilation during inference"), which would land in the figures. Two
  # waves of 64 with 64 tokens out, so that mixed prefill+decode steps (the shapes a burst of
  # short requests never makes) are compiled too: on 2026-11-29 a 64 x 16 warm-up left the fp8
  # engine's fused_moe_kernel JIT inside the measured run (TTFT p99 2.27 s there, 0.77 s in the
  # next run on the same engine)
  both "$d0" "$d1" vbench warmup gw 128 64
  both "$d0" "$d1" vbench gw_c64 gw 256 512
  both "$d0" "$d1" ibench inst_gw_c64 gw
  # prefill alone (1 token out, no decode steps beside it): how fast each engine prefills, the
  # part of TTFT that fp8 weights slowed on 2026-11-29
  both "$d0" "$d1" vbench prefill_c64 gw 256 1
  [ "$r" = "$EXTRA_ROUND" ] || return 0
  # one GPU (SERIAL): only the default engine gets the extras (device time)
  if [ "$SERIAL" = 1 ]; then case "$d0$d1" in *_D) ;; *) return 0 ;; esac; fi
  # what the gateway costs: straight to the engine, then gateways of GW_WORKERS and of one
  # worker alternating (with the round's inst_gw_c64 above: w1, direct, wN, w1, wN)
  both "$d0" "$d1" ibench inst_direct_c64 direct
  [ "$GW_WORKERS" -gt 1 ] || return 0
  # only the gateways in front of a running engine (SERIAL: the other one has none to relay to;
  # waiting for it cost 4 x 60 s of the 2026-11-29 lease)
  local s slots=""
  [ -n "$d0" ] && slots=0
  [ -n "$d1" ] && slots="$slots 1"
  for s in $slots; do gateway $s "$GW_WORKERS" && routed $s; done
  both "$d0" "$d1" ibench "inst_gw${GW_WORKERS}w_c64" gw
  for s in $slots; do gateway $s 1 && routed $s; done
  both "$d0" "$d1" ibench inst_gw1w_c64_b gw
  for s in $slots; do gateway $s "$GW_WORKERS" && routed $s; done
  both "$d0" "$d1" ibench "inst_gw${GW_WORKERS}w_c64_b" gw
  for s in $slots; do gateway $s 1 && routed $s; done
}

# next_pair: the next "slot0:slot1" pair: ROUNDS first, then the first line of $BASE/more_rounds
# (taken off the file); fails when none is left
next_pair() {
  local n=$r pairs
  read -ra pairs <<< "$ROUNDS"
  if [ "$n" -lt "${#pairs[@]}" ]; then echo "${pairs[$n]}"; return 0; fi
  local f=$BASE/more_rounds line
  [ -s "$f" ] || return 1
  line=$(head -n1 "$f" | tr -d '[:space:]'); sed -i 1d "$f"
  [ -n "$line" ] && echo "$line"
}

main() {
  setup || exit 1
  [ -n "${GATE:-}" ] && { log "waiting for $GATE"; for i in $(seq 1 600); do [ -f "$GATE" ] && break; sleep 1; done; }
  gateway 0 1 && gateway 1 1 || exit 1
  log "gateways up (1 worker each)"
  local r=0 pair
  while pair=$(next_pair); do
    r=$((r + 1))
    local c0=${pair%%:*} c1=${pair##*:}
    local d0=$RES/R${r}_gpu0_$c0 d1=$RES/R${r}_gpu1_$c1
    if [ "$SERIAL" = 1 ]; then
      log "round $r: $c0 then $c1, both on GPU 0"
      d0=$RES/R${r}_a_$c0 d1=$RES/R${r}_b_$c1
      start 0 "$c0" "$d0" && ready 0 "$d0" && measure $r "$d0" ""; stop 0 "$d0"
      start 1 "$c1" "$d1" && ready 1 "$d1" && measure $r "" "$d1"; stop 1 "$d1"
    else
      log "round $r: GPU0 $c0, GPU1 $c1"
      start 0 "$c0" "$d0" && start 1 "$c1" "$d1" || exit 1
      ready 0 "$d0" & local w0=$!
      ready 1 "$d1" & local w1=$!
      wait $w0; local ok0=$?; wait $w1; local ok1=$?
      [ $ok0 = 0 ] && [ $ok1 = 0 ] && measure $r "$d0" "$d1"
      stop 0 "$d0"; stop 1 "$d1"
    fi
    log "round $r done"
  done
  log "DONE"
  touch "$RES/DONE"
  for s in 0 1; do kill -TERM -- -"$(cat $BASE/gw$s/pid)" 2>/dev/null; done
}

main
