#!/usr/bin/env bash
# The GPU gate and preflight's GPU probe on a real GPU machine, with the standard library only
# (the doctor is what the hosts run; the probe is preflight's shell):
#   bash tests/gpu/gate_on_gpu.sh OUT_DIR [TORCH_PYTHON]
# Writes gate_default.json (the gate as `up` runs it: the engine's torch required, 0.6 of the
# type's peak), gate_injected.json (min_share 0.99: a healthy GPU below it must fail, naming the
# GPU, its figure, the threshold and the waiver), gate_waived.json (the same, waived: a warning)
# and preflight_probe.txt (preflight's probe output, a unit-test fixture).
set -uo pipefail
out=${1:?output directory}
torch_py=${2:-/opt/torch/.venv/bin/python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
py=$(command -v python3)
# the peaks the installer renders (installer/gpu/matrix.py), read from the role's defaults copy
peaks=$("$py" - <<'PY'
import json, re
text = open("playbooks/roles/gpu_verify/defaults/main.yml").read()
block = text.split("gpu_verify_peak_tflops:\n", 1)[1]
print(json.dumps({m[1]: float(m[2]) for m in re.finditer(r"^  (.+): ([\d.]+)$", block, re.M)}))
PY
)
gate() {  # name, extra doctor args...
  local name=$1; shift
  local start; start=$(date +%s)
  "$py" installer/gpu/doctor.py check --torch-python "$torch_py" --torch-required \
    --peak-tflops "$peaks" "$@" > "$out/$name.json" 2> "$out/$name.err"
  echo "$name: exit code $? after $(( $(date +%s) - start )) s" >> "$out/summary.txt"
}
gate gate_default --min-share 0.6
gate gate_injected --min-share 0.99 --no-nccl
gate gate_waived --min-share 0.99 --waive --no-nccl
"$py" - "$out/preflight_probe.txt" <<'PY'
import ast, subprocess, sys
def const(path, name):
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
probe = const("installer/preflight/hosts.py", "_PROBE") + const("installer/preflight/gpu.py", "PROBE")
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "PLI_BUNDLE_DIR": "/nonexistent", "PLI_RELEASE_FILE": "/nonexistent"}
out = subprocess.run(["sh", "-c", probe], env=env, capture_output=True, text=True)
open(sys.argv[1], "w").write(out.stdout)
PY
cat "$out/summary.txt"
