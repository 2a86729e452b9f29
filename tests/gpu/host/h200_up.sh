#!/usr/bin/env bash
# On the device tool's H200, after stage.sh's parts were copied into STASH (one call each, back to
# back): make the machine a systemd GPU host (systemd_host.sh), install the control side for its
# Python, and run the product as a user would: `installer up` with the signed bundle, then
# `installer status`. Everything it prints and every log goes under OUT.
#   bash tests/gpu/host/h200_up.sh STASH OUT
set -uo pipefail
S=$(cd "${1:?STASH}" && pwd); out=${2:?OUT}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export INSTALLER_STATE_DIR=/root/pli-state
t0=$(date +%s)
step() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

{
  cat /etc/os-release; command -v python3; python3 -V; ls -l /usr/bin/python3* 2>&1
  ldd --version | head -1; uname -r; echo "pid1: $(cat /proc/1/comm)"; nvidia-smi -L
  python3 -c 'import torch, sys; print("torch", torch.__version__, torch.version.cuda, sys.prefix)'
} > "$out/machine.txt" 2>&1
step "machine: $(grep PRETTY "$out/machine.txt")"

if [ -z "${PROBE:-}" ] && [ ! -f /root/bundle.tar ]; then
  cat "$S"/p[0-9][0-9]/bundle.part.* > /root/bundle.tar
  (cd /root && sha256sum -c "$S/p00/bundle.tar.sha256") || { step "bundle parts do not add up"; exit 3; }
fi
step "bundle: $(du -h /root/bundle.tar | cut -f1)"
# The inventory's monitoring tarballs are the bundle's own copies: taken from the verified-by-sum
# bundle when the stash lacks them, which saves one upload call of a short lease.
if [ ! -d "$S/site/tarballs" ] && [ -d "$S/tarballs" ]; then cp -a "$S/tarballs" "$S/site/tarballs"; fi
if [ ! -d "$S/site/tarballs" ]; then
  mkdir -p "$S/site/tarballs" && tar -xf /root/bundle.tar -C "$S/site/tarballs" --strip-components=1 \
    --wildcards 'monitoring/*.tar.gz' || { step "no monitoring tarballs in the bundle"; exit 3; }
fi

if ! pgrep -xf "/lib/systemd/systemd --system" >/dev/null; then
  bash "$here/systemd_host.sh" "$S/kit" "$S/site/id_h200.pub" / > "$out/systemd_host.txt" 2>&1 \
    || { step "systemd host failed"; cat "$out/systemd_host.txt"; exit 4; }
fi
step "$(grep -hE '^systemd:' "$out/systemd_host.txt" 2>/dev/null || echo 'systemd: already booted')"
# The host's key, for the inventory's known_hosts (host keys are always checked).
echo "[127.0.0.1]:2222 $(cut -d' ' -f1-2 /etc/ssh/ssh_host_ed25519_key.pub)" > "$S/site/known_hosts"
chmod 0600 "$S/site/id_h200"
# Debian's Alertmanager build reads its templates from here (tests/support/monitoring_tarballs.py).
mkdir -p /usr/share/prometheus && cp -r "$S/site/alertmanager-templates" /usr/share/prometheus/alertmanager

if [ ! -x /root/ctl/bin/installer ]; then
  python3 - "$S/kit" <<'PY'
import pathlib, sys, zipfile
whl = next(pathlib.Path(sys.argv[1]).glob("uv-*.whl"))  # the kit's
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
    pathlib.Path("/root/uv").write_bytes(z.read(name))
PY
  chmod 0755 /root/uv
  /root/uv venv -q --python "$(command -v python3)" --no-python-downloads /root/ctl \
    && /root/uv pip install -q --python /root/ctl/bin/python --offline --no-index --no-deps "$S"/ctl/*.whl \
    || { step "control venv failed"; exit 5; }
fi
export PATH=/root/ctl/bin:$PATH
step "control side: $(installer --help >/dev/null && echo ok), ssh $(command -v ssh)"

cd "$S/site"
if [ -n "${PROBE:-}" ]; then
  # what the proof relies on, without a bundle: Ansible over SSH into the systemd host, and CUDA
  # from the host's PyTorch inside a systemd unit (a clean environment)
  ANSIBLE_HOST_KEY_CHECKING=True ansible all -i '127.0.0.1,' -u root --private-key id_h200 \
    -e ansible_port=2222 --ssh-common-args="-o UserKnownHostsFile=$S/site/known_hosts" -m setup \
    -a 'gather_subset=min' > "$out/ansible_setup.txt" 2>&1; step "ansible setup exit $?"
  grep -E '"ansible_(distribution|distribution_version|python_version|service_mgr)"' "$out/ansible_setup.txt"
  NS=(nsenter -t "$(pgrep -xf '/lib/systemd/systemd --system' | head -1)" -m -p -u -i -C -r -w)
  "${NS[@]}" systemd-run --wait --pipe --quiet /opt/torch/.venv/bin/python3 -c \
    'import torch; x = torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16); print("cuda in a unit:", torch.cuda.get_device_name(0), float((x @ x)[0, 0]))' \
    > "$out/cuda_unit.txt" 2>&1; step "cuda in a unit exit $?"; cat "$out/cuda_unit.txt"
  installer validate -i h200.yml > "$out/validate.txt" 2>&1; step "validate exit $?"; cat "$out/validate.txt"
  exit 0
fi
step "installer up"
# what the engine does through its first start, every 15 s (a stretch the journal left unnamed)
bash "$here/sample_engine.sh" "$S/kit" "$out/engine_samples.txt" 15 & sampler=$!
installer up -i h200.yml --bundle /root/bundle.tar --trusted-key ./bundle-signing.pub 2>&1 | tee "$out/up.log" | tail -40
rc=${PIPESTATUS[0]}
kill "$sampler" 2>/dev/null
step "up exit $rc"
installer status -i h200.yml > "$out/status.txt" 2>&1; step "status exit $?"; cat "$out/status.txt"
# the units' own story, whatever the outcome (a failed engine's cause is only there)
NS=(nsenter -t "$(pgrep -xf '/lib/systemd/systemd --system' | head -1)" -m -p -u -i -C -r -w)
for u in private-llm-engine private-llm-gateway; do
  "${NS[@]}" journalctl --all -u "$u.service" -o short-unix --no-pager > "$out/journal_$u.txt" 2>&1
done
[ "$rc" = 0 ] || grep -E "Error|error:" "$out/journal_private-llm-engine.txt" | grep -v ulimit | tail -5 | cut -c1-400
cp -r "$INSTALLER_STATE_DIR/runs" "$out/runs" 2>/dev/null
exit "$rc"
