# Shared by experiment.sh and side_by_side.sh (sourced, from the repo root): the engine role's
# environment, installing vLLM from the staged wheels, and a gateway API key.
# Needs: DRY (1: no GPU, no vLLM), REPO, BASE, S (staged wheels), SITE, MODEL, CACHE, RES.

# NVLink multicast stays off in every process (the device tool's KINDS.md: it can take a shared
# host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$SITE:$REPO VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1
mkdir -p "$RES"
T_START=$(date +%s)
log() { echo "$(date -u +%H:%M:%S) +$(( $(date +%s) - T_START ))s $*" | tee -a "$RES/progress.log"; }

engine_env() {  # the engine role's environment (playbooks/roles/engine/templates/engine.env.j2)
  echo HOME=$CACHE XDG_CACHE_HOME=$CACHE VLLM_CACHE_ROOT=$CACHE/vllm TRITON_CACHE_DIR=$CACHE/triton \
    TORCHINDUCTOR_CACHE_DIR=$CACHE/inductor FLASHINFER_WORKSPACE_BASE=$CACHE CUDA_CACHE_PATH=$CACHE/nv \
    CUDA_CACHE_MAXSIZE=4294967296 TORCH_EXTENSIONS_DIR=$CACHE/torch_extensions VLLM_HOST_IP=127.0.0.1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
}

# install vLLM into $SITE (once), check the imports, wait for the model ($BASE/dsv2.done);
# a dry run writes a tiny WordLevel tokenizer instead of the model's
install_vllm() {
  if [ "$DRY" = 1 ]; then
    mkdir -p "$MODEL" && python3 -c "
from tokenizers import Tokenizer, models, pre_tokenizers
t = Tokenizer(models.WordLevel(vocab={f't{i}': i for i in range(1000)}, unk_token='t0'))
t.pre_tokenizer = pre_tokenizers.WhitespaceSplit(); t.save('$MODEL/tokenizer.json')"
    touch "$BASE/dsv2.done"
  elif [ ! -d "$SITE/vllm" ]; then
    log "installing vLLM"
    ( cd "$S" && W=vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl && cat vllm.part.* > "$W" \
      && echo "$(cat vllm.sha256)  $W" | sha256sum -c ) || { log "FATAL: vLLM wheel parts"; return 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$S"/*.whl 2>&1 \
      | grep -v WARNING | tail -2
    log "installed"
  fi
  local mods="service.app, installer.flows.bench, installer.gpu.tuner, typer"
  [ "$DRY" = 1 ] || mods="vllm.entrypoints.openai.api_server, vllm.benchmarks.serve, $mods"
  python3 -c "import $mods" || { log "FATAL: imports"; return 1; }
  for i in $(seq 1 150); do [ -f "$BASE/dsv2.done" ] && break; sleep 2; done
  [ -f "$BASE/dsv2.done" ] || { log "FATAL: model not written"; tail -5 "$BASE/gen.log"; return 1; }
}

# write_gateway_key DIR: a fresh key in DIR/key (0600) and only its hash in DIR/keys.json
write_gateway_key() {
  python3 - "$1" <<'EOF'
import json, os, secrets, sys
from service.keyfile import hash_secret
key, d = "sk-h200-" + secrets.token_urlsafe(24), sys.argv[1]
for path, text in ((f"{d}/key", key), (f"{d}/keys.json", json.dumps(
        {"version": 1, "keys": [{"name": "bench", "sha256": hash_secret(key)}]}))):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, text.encode()); os.close(fd)
EOF
}
