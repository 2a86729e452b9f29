#!/usr/bin/env bash
# Issue #36 item 3: two systemd hosts on one GPU machine, one model over both with vLLM's Ray
# backend, through `installer up` as a user runs it. After stage_ray2.sh's parts were copied into
# STASH (one device call each):
#   bash tests/gpu/host/ray_two_hosts.sh STASH OUT
# Each host is a container: its own root (an overlay of the machine's root on a tmpfs, so what the
# installer writes stays in that host), its own network namespace with an address on a veth pair
# to a bridge (10.36.0.2 h0, 10.36.0.3 h1; the control side, in the machine's namespace, has
# 10.36.0.1), its own hostname and /dev/shm, systemd as PID 1 (systemd_host.sh) and sshd on :22.
# Then `installer up -i ray2.yml`: a Ray head on h0 (which runs the engine, vLLM's Ray driver) and
# a Ray worker on h1; PP 2 puts rank 0 on h0 and rank 1 on h1, and NCCL's send/recv between them
# goes over the veth (NCCL_SOCKET_IFNAME=eth0 in engine.env). Everything goes under OUT.
#
# Switches (environment):
#   PHASE=hosts    stop once both hosts are booted and reached over SSH, and the inventory
#                  validates (what a machine without a GPU can rehearse); DOWN=1 removes them again
#   CTL=/root/ctl  the control side's venv (made from STASH/ctl when it has no installer)
#   PP=2           hosts one engine spans (gpu.pipeline_parallel_size)
#   GPUS_H0, GPUS_H1  which GPUs each host sees ("0", "0,1", "" for none), as /dev nodes; unset,
#                  a host sees every GPU of the machine (a one-GPU machine: both stages share it,
#                  each with engine.gpu_memory_utilization 0.4 of it)
#   On a 2-GPU machine: GPUS_H0=0 GPUS_H1=1 (PP 2 across hosts, TP 1); 4 GPUs: GPUS_H0=0,1
#   GPUS_H1=2,3 (TP 2 within a host, PP 2 across). gpu.count follows the GPUs each host sees.
set -uo pipefail
S=$(cd "${1:?STASH}" && pwd); out=$(mkdir -p "${2:?OUT}" && cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export INSTALLER_STATE_DIR=/root/pli-state-ray2
PP=${PP:-2}; BR=pli36br; NET=10.36.0
NAMES=(h0 h1); ADDR=("$NET.2" "$NET.3"); GPUS=("${GPUS_H0-all}" "${GPUS_H1-all}")
t0=$(date +%s)
step() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
root_of() { echo "/srv/pli36/$1/root"; }
# the systemd whose root is this host's (pgrep alone would find either host's)
sd_pid() { for p in $(pgrep -xf "/lib/systemd/systemd --system"); do
  [ "$(readlink "/proc/$p/root")" = "$(root_of "$1")" ] && { echo "$p"; return; }; done; }
inside() { local h=$1; shift; nsenter -t "$(sd_pid "$h")" -m -p -u -i -C -r -w -n "$@"; }

down() {
  for h in "${NAMES[@]}"; do
    p=$(sd_pid "$h"); [ -z "$p" ] || { kill -9 "$p"; sleep 1; }
    umount -R "$(root_of "$h")" 2>/dev/null; umount "/srv/pli36/$h/rw" 2>/dev/null
    ip netns del "pli36-$h" 2>/dev/null; ip link del "pli36-$h" 2>/dev/null
    rmdir "/sys/fs/cgroup/pli-$h" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null; true
}
if [ -n "${DOWN:-}" ]; then down; step "removed"; exit 0; fi

{
  uname -r; echo "pid1: $(cat /proc/1/comm)"; nvidia-smi -L 2>&1; nvidia-smi topo -m 2>&1
  findmnt -no TARGET,FSTYPE / ; findmnt -rno TARGET | grep -E '^/(opt|usr|root|data|workspace)' || true
} > "$out/machine.txt" 2>&1
step "machine: $(head -1 "$out/machine.txt"), $(grep -c '^GPU ' "$out/machine.txt") GPU(s)"

# The network: a bridge in the machine's namespace, a namespace per host with eth0 on a veth.
ip link add "$BR" type bridge 2>/dev/null; ip addr add "$NET.1/24" dev "$BR" 2>/dev/null; ip link set "$BR" up
for i in 0 1; do
  h=${NAMES[$i]}; ns=pli36-$h
  ip netns add "$ns" 2>/dev/null || true
  if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
    ip link add "pli36-$h" type veth peer name eth0 netns "$ns"
    ip link set "pli36-$h" master "$BR" up
    ip -n "$ns" addr add "${ADDR[$i]}/24" dev eth0
    ip -n "$ns" link set eth0 up; ip -n "$ns" link set lo up
  fi
done
step "network: $(ip -br addr show "$BR" | tr -s ' ')"
# The engine role loads nftables rules for Ray's ports on each host (installer/gpu/ray_firewall.py):
# say now, not at the role's task, if this machine's kernel gives a namespace no nf_tables.
if command -v nft >/dev/null; then
  if ip netns exec "pli36-${NAMES[0]}" nft add table inet pli_probe 2>"$out/nft_probe.txt"; then
    ip netns exec "pli36-${NAMES[0]}" nft delete table inet pli_probe; step "nftables: usable in the hosts' namespaces"
  else step "nftables: NOT usable in a namespace ($(head -1 "$out/nft_probe.txt")): up will fail at the Ray firewall"; fi
fi

# The roots: the machine's root, with each host's writes on a tmpfs of its own. What the machine
# mounts separately (the image's torch, the driver's libraries) is not in the overlay's lower
# layer: it is bound in, read-only.
for h in "${NAMES[@]}"; do
  R=$(root_of "$h"); mkdir -p "/srv/pli36/$h/rw" "$R"
  mountpoint -q "$R" && continue
  mount -t tmpfs -o size=48g,mode=0755 "tmpfs-$h" "/srv/pli36/$h/rw"
  mkdir -p "/srv/pli36/$h/rw/upper" "/srv/pli36/$h/rw/work"
  mount -t overlay "root-$h" -o "lowerdir=/,upperdir=/srv/pli36/$h/rw/upper,workdir=/srv/pli36/$h/rw/work" "$R" \
    || { step "overlay root of $h failed"; exit 4; }
  # (NVIDIA's container toolkit binds the driver's libraries and tools file by file, e.g.
  # /usr/lib/x86_64-linux-gnu/libcuda.so.1 and /usr/bin/nvidia-smi: the lower layer has only the
  # empty files they are bound onto; systemd_host.sh binds /usr/local/nvidia itself)
  for m in $(findmnt -rno TARGET | grep -E '^/(opt|usr|lib|lib64|bin|sbin|etc)/' \
             | grep -vE '^/usr/local/nvidia|^/etc/(hostname|hosts|resolv.conf)$' || true); do
    if [ -d "$m" ]; then mkdir -p "$R$m"; else [ -e "$R$m" ] || touch "$R$m"; fi
    mount --bind "$m" "$R$m" && mount -o remount,bind,ro "$R$m"
  done
  rm -rf "$R/srv/pli36" "$R/root/pli-state"* "$R/root/bundle.tar"  # the other hosts' and the control side's
done
step "roots: $(for h in "${NAMES[@]}"; do findmnt -no SOURCE,FSTYPE "$(root_of "$h")" | tr '\n' ' '; done)"

# The bundle and the monitoring tarballs, as h200_up.sh takes them.
if [ -z "${PHASE:-}" ] && [ ! -f /root/bundle.tar ]; then
  cat "$S"/p[0-9][0-9]/bundle.part.* > /root/bundle.tar
  (cd /root && sha256sum -c "$S/p00/bundle.tar.sha256") || { step "bundle parts do not add up"; exit 3; }
fi
if [ ! -d "$S/site/tarballs" ] && [ -f /root/bundle.tar ]; then
  mkdir -p "$S/site/tarballs" && tar -xf /root/bundle.tar -C "$S/site/tarballs" --strip-components=1 \
    --wildcards 'monitoring/*.tar.gz' || { step "no monitoring tarballs in the bundle"; exit 3; }
fi

# Boot both hosts.
: > "$S/site/known_hosts"
for i in 0 1; do
  h=${NAMES[$i]}; R=$(root_of "$h")
  if [ -z "$(sd_pid "$h")" ]; then
    GPUS=${GPUS[$i]} NAME=$h NETNS=pli36-$h LISTEN=${ADDR[$i]} PORT=22 \
      bash "$here/systemd_host.sh" "$S/kit" "$S/site/id_ray2.pub" "$R" > "$out/systemd_$h.txt" 2>&1 \
      || { step "systemd host $h failed"; cat "$out/systemd_$h.txt"; exit 4; }
  fi
  echo "${ADDR[$i]} $(cut -d' ' -f1-2 "$R/etc/ssh/ssh_host_ed25519_key.pub")" >> "$S/site/known_hosts"
  step "$h: $(grep -hE '^systemd:' "$out/systemd_$h.txt" 2>/dev/null || echo 'already booted'), pid $(sd_pid "$h"), hostname $(inside "$h" hostname), GPUs: $(inside "$h" nvidia-smi -L 2>/dev/null | wc -l)"
done
chmod 0600 "$S/site/id_ray2"
for i in 0 1; do
  ssh -o BatchMode=yes -o UserKnownHostsFile="$S/site/known_hosts" -i "$S/site/id_ray2" "root@${ADDR[$i]}" \
    'echo "$(hostname) $(cat /proc/1/comm) $(ip -br -4 addr show eth0 | tr -s " ")"' > "$out/ssh_${NAMES[$i]}.txt" 2>&1
  step "ssh ${ADDR[$i]}: exit $? $(cat "$out/ssh_${NAMES[$i]}.txt")"
done

# The control side (h200_up.sh's): a venv from the stash's wheels for the machine's Python.
CTL=${CTL:-/root/ctl}
if [ ! -x "$CTL/bin/installer" ]; then
  python3 - "$S/kit" <<'PY'
import pathlib, sys, zipfile
whl = next(pathlib.Path(sys.argv[1]).glob("uv-*.whl"))
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
    pathlib.Path("/root/uv").write_bytes(z.read(name))
PY
  chmod 0755 /root/uv
  /root/uv venv -q --python "$(command -v python3)" --no-python-downloads "$CTL" \
    && /root/uv pip install -q --python "$CTL/bin/python" --offline --no-index --no-deps "$S"/ctl/*.whl \
    || { step "control venv failed"; exit 5; }
fi
export PATH=$CTL/bin:$PATH

# The inventory for this machine: the GPU type nvidia-smi names, the GPUs each host sees, PP.
cd "$S/site"
count=$(inside h1 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "${count:-0}" -gt 0 ] || count=1  # no GPU (a rehearsal): the inventory's own count
gtype=$("$CTL/bin/python" -c 'import sys; from installer.gpu import matrix as m; t = m.gpu_type_of_name(sys.argv[1]); print(t.key if t else "h100")' \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" 2>/dev/null || echo h100)
sed -e "s/^  type: .*/  type: $gtype/" -e "s/^  count: .*/  count: ${count:-1}/" \
  -e "s/^  pipeline_parallel_size: .*/  pipeline_parallel_size: $PP/" ray2.yml > ray2.run.yml
installer validate -i ray2.run.yml > "$out/validate.txt" 2>&1; step "validate exit $?: $(tail -1 "$out/validate.txt")"
if [ -n "${PHASE:-}" ]; then
  # what `up` relies on first: Ansible over SSH into both hosts, with the inventory's key and known_hosts
  ANSIBLE_HOST_KEY_CHECKING=True ansible all -i "${ADDR[0]},${ADDR[1]}," -u root --private-key id_ray2 \
    -e ansible_python_interpreter=/usr/bin/python3 --ssh-common-args="-o UserKnownHostsFile=$S/site/known_hosts" -m setup -a 'gather_subset=min' > "$out/ansible_setup.txt" 2>&1
  step "ansible setup exit $?: $(grep -hoE '"ansible_(hostname|service_mgr)": "[^"]*"' "$out/ansible_setup.txt" | tr '\n' ' ')"
  exit 0
fi

# Debian's Alertmanager build reads its templates from here (tests/support/monitoring_tarballs.py).
[ -d /usr/share/prometheus/alertmanager ] || { mkdir -p /usr/share/prometheus && cp -r "$S/site/alertmanager-templates" /usr/share/prometheus/alertmanager; }
step "installer up"
installer up -i ray2.run.yml --bundle /root/bundle.tar --trusted-key ./bundle-signing.pub 2>&1 | tee "$out/up.log" | tail -40
rc=${PIPESTATUS[0]}
step "up exit $rc"
installer status -i ray2.run.yml > "$out/status.txt" 2>&1; step "status exit $?"; cat "$out/status.txt"

# Where Ray put vLLM's GPU workers: each process on a GPU, the host whose root it runs in.
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$out/gpu_apps.txt" 2>&1
while IFS=', ' read -r pid mem _; do
  [ -n "$pid" ] && echo "pid $pid $mem MiB root $(readlink "/proc/$pid/root") $(tr '\0' ' ' < "/proc/$pid/cmdline" | cut -c1-120)"
done < "$out/gpu_apps.txt" | tee "$out/placement.txt"
inside h0 bash -c "set -a; . /etc/private-llm/engine.env; /opt/private-llm/current/venv/bin/ray status --address $NET.2:6390" > "$out/ray_status.txt" 2>&1
for h in "${NAMES[@]}"; do
  for u in private-llm-ray private-llm-engine private-llm-gateway; do
    inside "$h" journalctl --all -u "$u.service" -o short-unix --no-pager > "$out/journal_${h}_$u.txt" 2>&1
  done
done
grep -hE "node_ip|placement|bundle|NCCL INFO (Channel|NET|Using network)|pipeline" "$out"/journal_h0_private-llm-engine.txt | tail -30 > "$out/engine_placement.txt"

# A completion through the gateway, and tok/s and TTFT with the product's bench (gateway on h0).
if [ "$rc" = 0 ]; then
  installer ca export -i ray2.run.yml > "$out/ca.pem"
  key=$(installer keys create --name "ray2-$(date +%s)" -i ray2.run.yml 2>&1 | grep -o 'sk-pli-[A-Za-z0-9_-]*' | head -1)
  model=$(python3 -c 'import yaml; print(yaml.safe_load(open("ray2.yml"))["model"]["served_name"])')
  gw=8080  # ports.gateway's default
  curl -s --cacert "$out/ca.pem" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    "https://$NET.2:$gw/v1/completions" -d "{\"model\": \"$model\", \"prompt\": \"one model, two hosts\", \"max_tokens\": 16}" \
    -w '\nhttp %{http_code} %{time_total} s\n' > "$out/completion.txt" 2>&1
  step "completion: $(tail -1 "$out/completion.txt")"
  # the tiny model's 512-token vocabulary: 100 words make about 256 of its tokens (h200_bench.sh)
  for c in 1 8; do
    OPENAI_API_KEY=$key SSL_CERT_FILE=$out/ca.pem installer bench --base-url "https://$NET.2:$gw/v1" --model "$model" \
      -c "$c" -n $((c * 8)) --input-len 100 --output-len 128 --json "$out/bench_c$c.json" \
      > "$out/bench_c$c.txt" 2>&1; step "bench c$c exit $?: $(grep -iE 'output tok/s|ttft' "$out/bench_c$c.txt" | tr -s ' ' | head -3 | tr '\n' ' ')"
  done
fi
# NCCL all-reduce bus bandwidth across the hosts (a rank in each, over the veth) and, with two
# GPUs or more in a host, within it. Units are stopped first: the GPU is theirs otherwise.
if [ -z "${NO_ALLREDUCE:-}" ]; then
  for h in "${NAMES[@]}"; do inside "$h" systemctl stop private-llm-engine private-llm-ray 2>/dev/null; done
  port=29536
  for pair in "across h0 h1" "within h1 h1"; do
    read -r label a b <<< "$pair"
    n=$(inside h1 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    [ "$label" = within ] && [ "${n:-0}" -lt 2 ] && { echo "within: $n GPU(s) in h1, nothing to measure" >> "$out/allreduce.txt"; continue; }
    ranks=("$a" "$b"); world=${#ranks[@]}; port=$((port + 1)); pids=()
    master=$NET.$([ "$a" = h0 ] && echo 2 || echo 3)  # rank 0's host
    for r in $(seq 0 $((world - 1))); do
      inside "${ranks[$r]}" env NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0 NCCL_DEBUG=INFO NCCL_NVLS_ENABLE=0 \
        RANK=$r WORLD_SIZE=$world LOCAL_RANK=$([ "$a" = "$b" ] && echo "$r" || echo 0) MASTER_ADDR=$master MASTER_PORT=$port \
        /opt/torch/.venv/bin/python3 - < "$here/allreduce_bw.py" > "$out/allreduce_${label}_r$r.txt" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    echo "$label: $(grep -h '^busbw' "$out/allreduce_${label}_r0.txt") $(grep -ho 'via NET/[A-Za-z]*' "$out/allreduce_${label}_r0.txt" | sort -u | tr '\n' ' ')" >> "$out/allreduce.txt"
  done
  step "all-reduce: $(tr '\n' ' ' < "$out/allreduce.txt")"
fi
cp -r "$INSTALLER_STATE_DIR/runs" "$out/runs" 2>/dev/null
exit "$rc"
