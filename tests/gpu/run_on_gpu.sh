#!/usr/bin/env bash
# Everything this project checks on a GPU machine, in one go (the device tool's H200):
#   bash tests/gpu/run_on_gpu.sh OUT_DIR
# Needs the installer's Python dependencies importable (PYTHONPATH) and python3 with torch.
# Writes: h200_r580/ (nvidia-smi captures for the unit tests), env_facts.txt, verify_roles.txt
# (the GPU roles in verify mode, connection local), doctor.txt + doctor.json (`installer doctor
# --local` and the fit planner on these facts), pytest_gpu.txt (`pytest -m gpu tests/gpu`).
set -uo pipefail
out=${1:?output directory}
mkdir -p "$out"
py=$(command -v python3)
# NVLink multicast stays off on shared GPU hosts (see the device tool's notes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# dependencies installed with pip --target keep their console scripts in <target>/bin; ansible-runner
# (the GPU roles test) starts ansible-playbook by name: on 2026-11-29 it exited 127 without this
for p in ${PYTHONPATH//:/ }; do [ -d "$p/bin" ] && PATH=$p/bin:$PATH; done
export PATH

{
  echo "== nvidia-smi"; nvidia-smi
  echo "== python"; "$py" -V; "$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())'
  echo "== init"; cat /proc/1/comm
  echo "== nccl"; dpkg-query -W 'libnccl*' 2>&1; ldconfig -p | grep -i nccl
  echo "== cuda"; ls -ld /usr/local/cuda* 2>&1; command -v nvcc
  echo "== pci (vendor 10de)"; grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>&1
  echo "== doctor facts"; "$py" installer/gpu/doctor.py facts
} > "$out/env_facts.txt" 2>&1

# fixtures for the unit tests, named for the machine (FIXTURE=h200x2_r580 on the two-GPU one)
bash tests/gpu/capture_fixtures.sh "$out/${FIXTURE:-h200_r580}"

start=$(date +%s)
ANSIBLE_ROLES_PATH=playbooks/roles ANSIBLE_CONFIG=playbooks/ansible.cfg ANSIBLE_NOCOLOR=1 \
  "$py" -m ansible.cli.playbook -i localhost, tests/gpu/verify_roles.yml \
  -e engine_device=gpu -e pli_bundle_dir=/tmp/pli-no-bundle -e pli_state_dir=/tmp/pli-state \
  -e pli_root=/tmp/pli-root -e ansible_python_interpreter="$py" \
  -e "{\"gpu_verify_torch_pythons\": [\"$py\"]}" > "$out/verify_roles.txt" 2>&1
echo "exit code $? after $(( $(date +%s) - start )) s" >> "$out/verify_roles.txt"

{
  "$py" -m installer doctor --local --json "$out/doctor.json"
  echo "exit code $?"
  echo "== fit planner and tuner on these facts"
  "$py" - <<'PY'
import json
from installer.gpu import doctor
from installer.gpu.planner import preset
from installer.gpu.tuner import HostHardware, TuneError, tune

hw = HostHardware.from_facts(doctor.facts())
for model, length in (("deepseek-v2-lite", 4096), ("deepseek-r1-distill-qwen-32b", 32768),
                      ("deepseek-r1-distill-llama-70b", 8192), ("deepseek-v3", 4096)):
    try:
        t = tune(preset(model), [hw], concurrency=64, max_model_len=length)
        print(model, json.dumps(t.settings), t.notes)
        for e in t.engines:  # which GPUs each engine got, over which link, pinned where
            links = sorted({hw.link(a, b) for a in e.gpus for b in e.gpus if a < b})
            print(f"  engine {e.index}: GPUs {e.gpus} links {links or '-'} NUMA {e.numa_nodes} CPUs {e.cpus} "
                  f"CUDA_VISIBLE_DEVICES={e.env.get('CUDA_VISIBLE_DEVICES')} port {e.port}")
    except TuneError as exc:
        print(model, "->", exc, exc.details)
PY
} > "$out/doctor.txt" 2>&1

"$py" -m pytest -m gpu tests/gpu -p no:cacheprovider -q -rA > "$out/pytest_gpu.txt" 2>&1
echo "exit code $?" >> "$out/pytest_gpu.txt"
tail -n 3 "$out/verify_roles.txt" "$out/doctor.txt" "$out/pytest_gpu.txt"
