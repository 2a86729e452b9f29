#!/usr/bin/env bash
# On the control machine (network to the package registries): everything the H200 proof carries,
# under OUT (a folder .git/info/exclude ignores), in parts small enough for one device call each.
#   bash tests/gpu/host/stage.sh OUT
# OUT/kit         Debian 12 systemd, dbus and OpenSSH .debs (systemd_host.sh unpacks them there), uv
# OUT/ctl         the control side for the GPU machine's Python 3.12: this project's wheel, its
#                 dependencies and uv (the machine has no network and no ssh client)
# OUT/site        the inventory (tests/gpu/host/h200.yml), its SSH key, the bundle's public key,
#                 the model and the monitoring tarballs the inventory names
# OUT/pNN         the signed bundle tar in parts, with bundle.tar.sha256 in p00
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
out=$(mkdir -p "${1:?OUT}" && cd "$1" && pwd)
py="$repo/.venv/bin/python"
export INSTALLER_STATE_DIR="$out/state"

rm -rf "$out/kit" && mkdir -p "$out/kit"
"$py" - "$out/kit" <<'PY'
import shutil, sys
from pathlib import Path
from installer.bundle import debs
# systemd, dbus and OpenSSH with the libraries they link (named too: the GPU machine's image has
# most of them, newer, and systemd_host.sh keeps what is there)
names = """systemd systemd-sysv dbus openssh-server openssh-client libpam-systemd libgcrypt20
libgpg-error0 liblz4-1 libzstd1 liblzma5 libseccomp2 libcap2 libacl1 libaudit1 libcap-ng0 libpam0g
libselinux1 libpcre2-8-0 libmount1 libblkid1 libcrypt1 libsystemd0 libudev1 zlib1g libssl3 libkmod2
mount util-linux libcom-err2 libkeyutils1 libtinfo6 libmd0 libuuid1 libsmartcols1""".split()
for deb in debs.download_debs(names):
    shutil.copy(deb, Path(sys.argv[1]) / deb.name)
PY

rm -rf "$out/ctl" && mkdir -p "$out/ctl"
plat=(--platform manylinux2014_x86_64)
for n in 17 24 26 27 28 31 34 35 38 39; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
# from the checkout's pyproject.toml, not the installed metadata: an editable install's metadata
# is as old as its last `pip install -e` (it lacked cyclonedx-python-lib on 2026-12-01)
reqs=$("$py" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$repo/pyproject.toml")
# shellcheck disable=SC2086
"$py" -m pip download -q --only-binary=:all: --python-version 3.12.3 --implementation cp "${plat[@]}" \
  -d "$out/ctl" $(echo "$reqs" | tr -d ' ' | tr '\n' ' ')
# uv with the kit: each folder must travel in one call (64 MiB with the repository)
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$out/kit" \
  "$("$py" -c 'from installer.bundle.wheels import UV_REQUIREMENT as u; print(u)')"
"$py" -m pip wheel -q --no-deps -w "$out/ctl" "$repo"
# py-spy for sample_engine.sh: names what an engine start spends its time on
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12.3 --implementation cp \
  "${plat[@]}" -d "$out/kit" py-spy==0.4.3

rm -rf "$out/site" && mkdir -p "$out/site/tarballs"
cp "$here/h200.yml" "$out/site/h200.yml"
ssh-keygen -q -t ed25519 -N '' -C pli-h200-proof -f "$out/site/id_h200"
"$py" -m installer.modelmaker "$out/site/model" --kind deepseek-fp8 >/dev/null
"$py" - "$out/site/tarballs" <<'PY'
# Upstream-layout Prometheus tarballs from Debian's binaries, as tests/integration/test_monitoring_tarballs.py
import sys
from pathlib import Path
from tests.support.monitoring_tarballs import upstream_tarballs
print(upstream_tarballs(Path(sys.argv[1])))
PY
cp -r /usr/share/prometheus/alertmanager "$out/site/alertmanager-templates"

[ -f "$out/site/known_hosts" ] || : > "$out/site/known_hosts"  # h200_up.sh writes the host's key
[ -z "${NO_BUNDLE:-}" ] || exit 0
cd "$out/site"
# a second staging keeps the key (keygen refuses to replace it: old bundles would stop verifying)
[ -f "$INSTALLER_STATE_DIR/keys/bundle-signing.key" ] || "$py" -m installer bundle keygen >/dev/null
cp "$INSTALLER_STATE_DIR"/keys/*.pub "$out/site/"
"$py" -m installer bundle build -i h200.yml -o "$out/bundle.tar"
cd "$out"; rm -rf p[0-9][0-9]; mkdir -p parts
split -b 55000000 -d bundle.tar parts/bundle.part.
for p in parts/bundle.part.*; do d="p${p##*.}"; mkdir -p "$d"; mv "$p" "$d/"; done; rmdir parts
sha256sum bundle.tar | sed 's| .*|  bundle.tar|' > p00/bundle.tar.sha256
du -sh kit ctl site p[0-9][0-9]
