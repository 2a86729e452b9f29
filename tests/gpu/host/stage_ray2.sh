#!/usr/bin/env bash
# On the control machine: what ray_two_hosts.sh carries to the GPU machine (#36 item 3), under OUT
# (a folder .git/info/exclude ignores), in parts of one device call each (64 MiB a call with the
# repository's ~10 MB): stage.sh's kit and control side, then the two-host site and bundle.
#   bash tests/gpu/host/stage_ray2.sh OUT
# OUT/kit, OUT/ctl  as stage.sh makes them (systemd, dbus, OpenSSH .debs and uv; the control side)
# OUT/site          ray2.yml, its SSH key (id_ray2), the bundle's public key, the lab's 2-layer
#                   Llama (a layer per pipeline stage) and Alertmanager's templates; the monitoring
#                   tarballs are taken from the bundle on the machine, as h200_up.sh does
# OUT/pNN           the signed bundle for ray2.yml in parts, bundle.tar.sha256 in p00: vLLM 0.26.0
#                   on the image's torch (the host-torch lock), with Ray 2.58.0 for the Ray units
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
out=$(mkdir -p "${1:?OUT}" && cd "$1" && pwd)
py="$repo/.venv/bin/python"
export INSTALLER_STATE_DIR="$out/state"

NO_BUNDLE=1 bash "$here/stage.sh" "$out"
# the H200 proof's own files are not this run's (and its model is larger than the lab's)
rm -rf "$out/site/model" "$out/site/h200.yml" "$out/site/id_h200" "$out/site/id_h200.pub" "$out/site/tarballs"
cp "$here/ray2.yml" "$out/site/ray2.yml"
[ -f "$out/site/id_ray2" ] || ssh-keygen -q -t ed25519 -N '' -C pli-ray2-proof -f "$out/site/id_ray2"
"$py" -m installer.modelmaker "$out/site/model" >/dev/null
# bundle build reads the inventory's monitoring tarballs: tiny ones of the upstream layout here,
# left out of the site (ray_two_hosts.sh takes the bundle's own copies on the machine)
mkdir -p "$out/tarballs-build"
"$py" - "$out/tarballs-build" <<'PY'
import sys
from pathlib import Path
from tests.support.monitoring_tarballs import upstream_tarballs
print(upstream_tarballs(Path(sys.argv[1])))
PY
cd "$out/site"
ln -sfn "$out/tarballs-build" tarballs
[ -f "$INSTALLER_STATE_DIR/keys/bundle-signing.key" ] || "$py" -m installer bundle keygen >/dev/null
cp "$INSTALLER_STATE_DIR"/keys/*.pub "$out/site/"
"$py" -m installer bundle build -i ray2.yml -o "$out/bundle.tar"
rm -f tarballs
tar -tf "$out/bundle.tar" | grep -E 'ray-2\.58\.0-.*\.whl' || { echo "the bundle has no Ray wheel"; exit 1; }
cd "$out"; rm -rf p[0-9][0-9]; mkdir -p parts
split -b 55000000 -d bundle.tar parts/bundle.part.
for p in parts/bundle.part.*; do d="p${p##*.}"; mkdir -p "$d"; mv "$p" "$d/"; done; rmdir parts
sha256sum bundle.tar | sed 's| .*|  bundle.tar|' > p00/bundle.tar.sha256
du -sh kit ctl site p[0-9][0-9]
