#!/usr/bin/env bash
# On the GPU machine after h200_up.sh (same lease): issue #39's two GPU measurements, with the
# project's benchmarks (results under OUT and benchmarks/results/ of this copy).
#   PART=verify bash tests/gpu/host/h200_weights.sh OUT
#       in-place verify of a 40 GB folder (5 GB shards): page cache warm (3 rounds), then cold
#   PART=load WHEELS=DIR [COLD=1] [ROUNDS=2] bash tests/gpu/host/h200_weights.sh OUT
#       vLLM's load formats on a >= 20 GB random-weight checkpoint, with the engine's own Python;
#       the engine unit is stopped first (the GPU's memory), the two streaming loaders' wheels
#       (fastsafetensors, runai-model-streamer + humanize) installed into its venv from WHEELS
set -uo pipefail
out=${1:?OUT}; mkdir -p "$out"
repo=$(cd "$(dirname "$0")/../../.." && pwd); cd "$repo"
df -h /var/tmp > "$out/df_$PART.txt"; nproc >> "$out/df_$PART.txt"
case ${PART:?verify or load} in
verify)
  python3 -m benchmarks.weights_verify --size-gb 40 --rounds 3 --runs all-per-piece,all-per-file \
    --dir /var/tmp/pli-wv > "$out/verify_warm.txt" 2>&1; echo "warm exit $?"
  python3 -m benchmarks.weights_verify --size-gb 40 --rounds 2 --runs all-per-piece --cold \
    --dir /var/tmp/pli-wv > "$out/verify_cold.txt" 2>&1; echo "cold exit $?"
  rm -rf /var/tmp/pli-wv
  tail -8 "$out/verify_warm.txt" "$out/verify_cold.txt"
  ;;
load)
  NS=(nsenter -t "$(pgrep -xf '/lib/systemd/systemd --system' | head -1)" -m -p -u -i -C -r -w)
  "${NS[@]}" systemctl stop private-llm-engine.service
  py=/opt/private-llm/current/venv/bin/python
  /root/uv pip install -q --python "$py" --offline --no-index --no-deps "${WHEELS:?}"/*.whl || exit 5
  "$py" -m benchmarks.load_formats --size-gb 21 --rounds "${ROUNDS:-2}" ${COLD:+--cold} > "$out/load${COLD:+_cold}.txt" 2>&1
  echo "load exit $?"; tail -8 "$out/load${COLD:+_cold}.txt"
  ;;
esac
cp benchmarks/results/weights_verify-* benchmarks/results/load_formats-* "$out/" 2>/dev/null
exit 0
