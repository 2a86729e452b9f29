#!/usr/bin/env bash
# Beside an engine start on the GPU machine (h200_up.sh, h200_faststart.sh): every INTERVAL
# seconds, what the engine's processes are doing -- each vLLM process's Python stack (py-spy dump,
# from the kit's wheel), the busiest processes (a JIT compiler started by the engine shows here:
# nvcc, ptxas, ninja) and the size of each cache under the engine's cache folder -- so that a
# stretch of the start the journal does not name gets a name. Runs until killed (by its PID).
#   bash tests/gpu/host/sample_engine.sh KIT OUT [INTERVAL]
set -u
kit=$(cd "${1:?KIT}" && pwd); out=${2:?OUT}; every=${3:-15}
spy=/root/py-spy
if [ ! -x "$spy" ]; then
  python3 - "$kit" "$spy" <<'PY' || true
import pathlib, sys, zipfile
whl = next(pathlib.Path(sys.argv[1]).glob("py_spy-*.whl"))
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith("/py-spy") and ".data/scripts/" in n)
    pathlib.Path(sys.argv[2]).write_bytes(z.read(name))
PY
  chmod 0755 "$spy" 2>/dev/null
fi
while :; do
  {
    echo "=== $(date -u +%T)"
    ps -eo pid,ppid,etimes,pcpu,rss,comm,args --sort=-pcpu | head -12 | cut -c1-240
    du -sh /var/cache/private-llm/* /var/cache/private-llm/.[a-z]* 2>/dev/null | sort -h | tail -12
    for p in $(pgrep -f 'vllm.entrypoints.openai.api_server|EngineCore' 2>/dev/null); do
      echo "--- py-spy $p ($(cat /proc/"$p"/comm 2>/dev/null))"
      timeout 20 "$spy" dump --pid "$p" 2>&1 | head -45 | cut -c1-240
    done
  } >> "$out" 2>&1
  sleep "$every"
done
