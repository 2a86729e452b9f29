#!/usr/bin/env bash
# Turn a GPU machine that has no systemd (the device tool's H200: an Ubuntu 24.04 image, PID 1 is
# not systemd) into a host `installer up` can target: Debian 12's systemd, dbus and OpenSSH are
# unpacked over the machine's own root (files it lacks only: its newer libraries stay), then
# systemd boots as PID 1 of new PID, mount, UTS, IPC and cgroup namespaces over that same root, so
# the host's own Python, its CUDA PyTorch and /dev (the GPU) are what the units see. sshd listens
# on 127.0.0.1:$PORT with the given public key. Issue #20 option (a): the product refuses hosts
# without systemd; this is the systemd container the proof runs in.
#
#   bash tests/gpu/host/systemd_host.sh KIT_DIR PUBKEY_FILE [ROOT]
#     KIT_DIR      Debian 12 .debs (tests/gpu/host/make_kit.sh)
#     ROOT         / on the GPU machine; a rootfs folder to rehearse on another machine (chroot)
# Prints SYSTEMD_PID=<pid>; `nsenter -t PID -m -p -u -i -C -r -w CMD` runs CMD inside.
# Several hosts on one machine (ray_two_hosts.sh): each its own ROOT (an overlay of the machine's
# root), NAME (its hostname, cgroup and boot log), NETNS (a network namespace made beforehand; the
# container also gets a private /dev/shm), LISTEN (sshd's address in that namespace) and GPUS
# (the GPUs it sees, "0,1" or "" for none, as the NVIDIA container toolkit does it: only their
# /dev/nvidiaN nodes; default all of /dev).
set -euo pipefail
kit=$(cd "${1:?kit dir}" && pwd); pub=${2:?public key file}; R=${3:-/}; PORT=${PORT:-2222}
NAME=${NAME:-}; NETNS=${NETNS:-}; LISTEN=${LISTEN:-127.0.0.1}; GPUS=${GPUS:-all}
cg=/sys/fs/cgroup/pli${NAME:+-$NAME}; boot_log=/tmp/pli-systemd-boot${NAME:+-$NAME}.log
R=${R%/}; [ -n "$R" ] || R=""
stage=$(mktemp -d)
for deb in "$kit"/*.deb; do dpkg-deb -x "$deb" "$stage"; done
# Files the root already has win: its libraries are the same sonames, newer.
tar -C "$stage" -cf - . | tar -C "$R/" -xf - --skip-old-files --keep-directory-symlink
rm -rf "$stage"
# a fresh root (an overlay whose lower /dev is the machine's empty mount point) has no /dev/null
# for the chroot'ed tools below; the boot mounts the real /dev over it
[ -e "$R/dev/null" ] || mknod -m 0666 "$R/dev/null" c 1 3
missing=$(for b in /lib/systemd/systemd /usr/sbin/sshd /usr/bin/ssh /usr/bin/dbus-daemon /lib/systemd/systemd-journald; do
  chroot "$R/" /usr/bin/ldd "$b" | grep "not found" | sed "s|^|$b: |"; done || true)
[ -z "$missing" ] || { echo "libraries missing on this root (add their packages to the kit):"; echo "$missing"; exit 1; }

# What the packages' maintainer scripts would have done, and no more.
grep -q '^messagebus:' "$R/etc/passwd" || echo 'messagebus:x:101:101::/nonexistent:/usr/sbin/nologin' >> "$R/etc/passwd"
grep -q '^messagebus:' "$R/etc/group" || echo 'messagebus:x:101:' >> "$R/etc/group"
grep -q '^sshd:' "$R/etc/passwd" || echo 'sshd:x:102:65534::/run/sshd:/usr/sbin/nologin' >> "$R/etc/passwd"
mkdir -p "$R/etc/ssh/sshd_config.d" "$R/root/.ssh" "$R/var/log/journal"
[ -s "$R/etc/machine-id" ] || head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$R/etc/machine-id"
[ -f "$R/etc/ssh/sshd_config" ] || cp "$R/usr/share/openssh/sshd_config" "$R/etc/ssh/sshd_config"
chroot "$R/" /usr/bin/ssh-keygen -A >/dev/null
cat > "$R/etc/ssh/sshd_config.d/pli-gpu-host.conf" <<EOF
Port $PORT
ListenAddress $LISTEN
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
EOF
install -m 0600 "$pub" "$R/root/.ssh/authorized_keys"
chmod 0700 "$R/root/.ssh"
# The driver's user-space libraries: containers get them in /usr/local/nvidia (the NVIDIA container
# toolkit's layout); units start with a clean environment, so ld.so must know the folder.
if [ -d /usr/local/nvidia/lib64 ]; then
  echo /usr/local/nvidia/lib64 > "$R/etc/ld.so.conf.d/pli-nvidia.conf"
  chroot "$R/" /sbin/ldconfig
fi
# enabled as the package's postinst would (dpkg-deb -x runs no maintainer scripts)
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -sf /lib/systemd/system/ssh.service "$R/etc/systemd/system/multi-user.target.wants/ssh.service"
# Units start with their own environment: NVLink multicast stays off in every one of them, as on
# any shared GPU machine of the device tool (a program using it can take the host's GPUs down).
mkdir -p "$R/etc/systemd/system.conf.d"
printf '[Manager]\nDefaultEnvironment=NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1\n' \
  > "$R/etc/systemd/system.conf.d/pli-gpu-host.conf"
# the host's name: NCCL tells hosts apart by hostname and boot id, vLLM's and Ray's logs by name
[ -z "$NAME" ] || echo "$NAME" > "$R/etc/hostname"
# units that need hardware or a console a container lacks
for u in getty@tty1.service console-getty.service systemd-remount-fs.service; do
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done

mkdir -p "$cg"
inner=$(mktemp)
cat > "$inner" <<EOS
set -e
R="$R"
mount --make-rprivate /
if [ -n "\$R" ]; then
  # recursive: what was bound under ROOT before the boot (ray_two_hosts.sh's driver files) stays
  mount --rbind "\$R" "\$R"; mount --rbind /sys "\$R/sys"
  if [ "$GPUS" = all ]; then mount --rbind /dev "\$R/dev"
  else  # a /dev of its own: the machine's nodes but the GPUs it is not given
    mount -t tmpfs -o mode=0755,nosuid tmpfs "\$R/dev"
    for n in /dev/*; do
      case "\$n" in /dev/nvidia[0-9]*) ;; *)
        if [ -d "\$n" ]; then mkdir -p "\$R\$n"; mount --rbind "\$n" "\$R\$n"
        elif [ -L "\$n" ]; then cp -P "\$n" "\$R\$n"
        else touch "\$R\$n"; mount --bind "\$n" "\$R\$n"; fi ;;
      esac
    done
    for g in \$(echo "$GPUS" | tr , ' '); do touch "\$R/dev/nvidia\$g"; mount --bind "/dev/nvidia\$g" "\$R/dev/nvidia\$g"; done
  fi
  # a host of its own: its own shared memory (vLLM and NCCL would otherwise see one host)
  [ -z "$NAME" ] || mount -t tmpfs -o mode=1777,size=16g tmpfs "\$R/dev/shm"
  if [ -d /usr/local/nvidia ]; then mkdir -p "\$R/usr/local/nvidia"; mount --rbind /usr/local/nvidia "\$R/usr/local/nvidia"; fi
fi
mount -t proc proc "\$R/proc"
umount -l "\$R/sys/fs/cgroup" 2>/dev/null || true
mount -t cgroup2 cgroup2 "\$R/sys/fs/cgroup"
mount -t tmpfs -o mode=0755 tmpfs "\$R/run"
mount -t tmpfs -o mode=1777 tmpfs "\$R/tmp"
cd "\$R/"
exec chroot . /usr/bin/env container=other /lib/systemd/systemd --system
EOS
in_ns=(); [ -z "$NETNS" ] || in_ns=(ip netns exec "$NETNS")
( echo $BASHPID > "$cg/cgroup.procs"
  exec "${in_ns[@]}" setsid unshare --pid --fork --mount --uts --ipc --cgroup bash "$inner" ) > "$boot_log" 2>&1 < /dev/null &
# this ROOT's systemd (another host's may run beside it)
mine() { for p in $(pgrep -xf "/lib/systemd/systemd --system"); do
  [ "$(readlink "/proc/$p/root")" = "${R:-/}" ] && { echo "$p"; return; }; done; }
P=""
for _ in $(seq 60); do
  P=$(mine || true)
  [ -n "$P" ] && break; sleep 0.5
done
[ -n "$P" ] || { echo "systemd did not start"; cat "$boot_log"; exit 1; }
N=(nsenter -t "$P" -m -p -u -i -C -r -w)
state=""
for _ in $(seq 60); do
  state=$("${N[@]}" /bin/systemctl is-system-running 2>/dev/null || true)
  case "$state" in running|degraded) break ;; esac
  sleep 1
done
echo "systemd: $state"
"${N[@]}" /bin/systemctl --failed --no-pager --plain 2>&1 | head -12 || true
"${N[@]}" /bin/systemctl is-active ssh.service || { "${N[@]}" /bin/journalctl -u ssh --no-pager | tail -20; exit 1; }
echo "SYSTEMD_PID=$P"
