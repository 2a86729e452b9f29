"""The air-gapped install, proven: a signed bundle built on a connected machine, then
`installer up --bundle` from a control process that has no route to anything but the lab hosts
(its own network namespace on the lab bridge), onto lab hosts that have no network either.

A bundle with one flipped byte is refused before any host is touched; an interrupted push
resumes where it stopped. Runs after the shared first deployment (`deployed`), on the same lab.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.base.paths import PLAYBOOKS_DIR as REPO_PLAYBOOKS
from installer.base.paths import cache_dir
from installer.bundle import sign
from installer.bundle.build import build
from installer.bundle.manifest import CHECKSUMS, MANIFEST, SIGNATURE, Manifest
from installer.inventory import load_inventory
from installer.lab import control_ns
from tests.support.e2e import REPO, installer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

HOST_BUNDLES = "/var/lib/private-llm/bundles"
INTERRUPT_AFTER = 300 * 1000**2  # bytes into the first host's copy when the push is killed


def _host_ssh(lab_hosts, host, command: str, timeout: float = 120) -> str:
    argv = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={lab_hosts.known_hosts}",
        "-i",
        str(lab_hosts.private_key),
        f"root@{host.address}",
        command,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{host.name}: {command}: {proc.stderr}"
    return proc.stdout


def _summary(e2e_state: Path, deployment: str) -> dict:
    """The latest `installer up` run log summary of this lab's deployment (other labs' runs
    may share the state directory)."""
    runs = sorted((e2e_state / "runs").glob(f"*-up-{deployment}"), key=lambda p: p.stat().st_mtime)
    return json.loads((runs[-1] / "summary.json").read_text())


def _snapshot(lab_hosts) -> dict[str, str]:
    """What an install would change on a host: bundles, releases, the current link, the engine."""
    command = (
        f"find {HOST_BUNDLES} /opt/private-llm /etc/private-llm -maxdepth 2 "
        "-printf '%p %T@ %s\\n' | sort; readlink /opt/private-llm/current; "
        "systemctl show -p ActiveEnterTimestampMonotonic --value private-llm-engine"
    )
    return {h.name: _host_ssh(lab_hosts, h, command) for h in lab_hosts.hosts}


@pytest.fixture(scope="module")
def airgap_dir(e2e_state: Path) -> Iterator[Path]:
    # Next to the state: the signed tar, the key pair, the flipped copies (1 GB each, removed after).
    path = e2e_state / "airgap"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def signing_key(airgap_dir: Path) -> sign.KeyPair:
    return sign.keygen(airgap_dir / "keys", "airgap-test")


@pytest.fixture(scope="module")
def signed_bundle(
    deployed, lab_hosts, airgap_dir: Path, signing_key: sign.KeyPair
) -> Iterator[Path]:
    """`installer bundle build` on the connected machine (this one, outside the namespace)."""
    out = airgap_dir / "site-bundle.tar"
    proc = installer(
        "bundle",
        "build",
        "--inventory",
        str(lab_hosts.inventory_path),
        "--output",
        str(out),
        "--sign-key",
        str(signing_key.private_key),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"signed with key {signing_key.key_id}" in proc.stdout
    with tarfile.open(out) as tar:
        bundle_id = json.loads(tar.extractfile(MANIFEST).read())["bundle_id"]
    yield out
    # `up --bundle` unpacked it into the shared cache: 1 GB a run otherwise.
    shutil.rmtree(cache_dir() / "unpacked" / bundle_id[:24], ignore_errors=True)


@pytest.fixture(scope="module")
def control(lab_hosts) -> Iterator[control_ns.ControlNamespace]:
    control_ns.remove(lab_hosts.name)  # a namespace an aborted earlier run left behind
    ns = control_ns.create(lab_hosts.name)
    yield ns
    control_ns.remove(lab_hosts.name)
    assert control_ns.leftovers(lab_hosts.name) == []


def airgapped(lab_hosts, *argv: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run a Python command line as the control process inside the control namespace."""
    return subprocess.run(
        control_ns.run_argv(lab_hosts.name, [sys.executable, *argv]),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )


def up_airgapped(lab_hosts, bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return airgapped(
        lab_hosts,
        "-m",
        "installer",
        "up",
        "--inventory",
        str(lab_hosts.inventory_path),
        "--bundle",
        str(bundle),
        *extra,
    )


def flip_byte(src: Path, dst: Path, member: str, where: float) -> None:
    shutil.copyfile(src, dst)
    with tarfile.open(dst) as tar:
        info = tar.getmember(member)
    offset = info.offset_data + int(info.size * where)
    with dst.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ 0x01]))


def test_the_control_namespace_has_a_route_to_the_lab_only(control, lab_hosts) -> None:
    routes = (
        subprocess.run(
            ["ip", "-n", control.name, "-4", "route", "show"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    assert len(routes) == 1 and routes[0].startswith(f"{lab_hosts.subnet} dev eth0"), routes
    assert not any(r.startswith("default") for r in routes)
    addrs = subprocess.run(
        ["ip", "-n", control.name, "-4", "-o", "addr", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"inet {control.address}/" in addrs


@pytest.mark.parametrize(
    ("member", "where", "message"),
    [
        ("model/model.safetensors", 0.5, "sha256 mismatch"),  # payload: its checksum fails
        (MANIFEST, 0.4, "changed after it was signed"),  # the signed list itself
    ],
    ids=["payload-byte", "manifest-byte"],
)
def test_a_flipped_byte_is_refused_before_any_host_changes(
    control,
    lab_hosts,
    signed_bundle: Path,
    signing_key: sign.KeyPair,
    airgap_dir: Path,
    member: str,
    where: float,
    message: str,
) -> None:
    bad = airgap_dir / "tampered.tar"
    flip_byte(signed_bundle, bad, member, where)
    before = _snapshot(lab_hosts)
    try:
        proc = up_airgapped(lab_hosts, bad, "--trusted-key", str(signing_key.public_key))
    finally:
        bad.unlink()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert message in output, output[-3000:]
    assert "✗ bundle" in output and "▶ preflight" not in output  # no host was even contacted
    assert _snapshot(lab_hosts) == before


def test_an_unsigned_bundle_is_refused_without_insecure(control, lab_hosts, signed_bundle) -> None:
    # The same bytes without a signature: the cached bundle directory the signed tar was made from.
    unsigned, _man, _built = build(load_inventory(lab_hosts.inventory_path))
    assert not (unsigned / SIGNATURE).exists()
    before = _snapshot(lab_hosts)
    proc = up_airgapped(lab_hosts, unsigned)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not signed" in proc.stderr and "--insecure" in proc.stderr
    assert "▶ preflight" not in proc.stdout
    assert _snapshot(lab_hosts) == before


# Runs in the control namespace: push the signed bundle to one host and kill the copy's ssh
# process (by PID) once `limit` bytes are on their way, as a dropped link would.
_INTERRUPTED_PUSH = """
import os, signal, subprocess, sys
from pathlib import Path
from installer.bundle import build, push, sign
from installer.inventory import load_inventory
from installer.hosts.ssh import targets

inventory, bundle, trusted, host, limit = sys.argv[1:]
opened = build.open_bundle(Path(bundle), sign.Trust(keys=(Path(trusted),)))
target = next(t for t in targets(load_inventory(Path(inventory))) if t.name == host)
started, killed = [], []
real_popen = subprocess.Popen

def popen(*args, **kwargs):
    proc = real_popen(*args, **kwargs)
    started.append(proc)
    return proc

def progress(_host, sent, _total):
    if sent > int(limit) and not killed:
        os.kill(started[-1].pid, signal.SIGKILL)
        killed.append(sent)

push.subprocess.Popen = popen
try:
    push.push_one(target, opened.root, opened.manifest, progress)
except Exception as exc:
    print(f"interrupted after {killed[0] if killed else 0} bytes: {exc}")
else:
    print("not interrupted")
"""


def test_airgapped_up_resumes_an_interrupted_push_and_serves(
    control, lab_hosts, signed_bundle: Path, signing_key: sign.KeyPair, e2e_state: Path
) -> None:
    first, second = lab_hosts.hosts[0], lab_hosts.hosts[1]
    with tarfile.open(signed_bundle) as tar:
        manifest_bytes = tar.extractfile(MANIFEST).read()
        signature = tar.extractfile(SIGNATURE).read()
        checksums = tar.extractfile(CHECKSUMS).read()
    man = Manifest.from_json(manifest_bytes.decode())
    # Hosts that never held this bundle, and one that lacks the OS package the engine needs.
    for host in lab_hosts.hosts:
        _host_ssh(lab_hosts, host, f"rm -rf {HOST_BUNDLES}/*")
    _host_ssh(lab_hosts, second, "dpkg --purge libnuma1")

    # 1. A push from the control namespace, killed a few hundred MB into the first host's copy.
    proc = airgapped(
        lab_hosts,
        "-c",
        _INTERRUPTED_PUSH,
        str(lab_hosts.inventory_path),
        str(signed_bundle),
        str(signing_key.public_key),
        first.name,
        str(INTERRUPT_AFTER),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "interrupted after" in proc.stdout, proc.stdout + proc.stderr
    held = _host_ssh(lab_hosts, first, f"find {HOST_BUNDLES} -type f -printf '%s %f\\n'")
    held_bytes = sum(int(line.split()[0]) for line in held.splitlines())
    assert INTERRUPT_AFTER // 2 < held_bytes < man.total_size, held
    assert MANIFEST not in held.split()  # the manifest travels last: not a complete bundle

    # 2. The air-gapped install: signed bundle, no route but the lab.
    proc = up_airgapped(lab_hosts, signed_bundle, "--trusted-key", str(signing_key.public_key))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    summary = _summary(e2e_state, load_inventory(lab_hosts.inventory_path).deployment)
    assert summary["success"] is True
    assert summary["bundle_id"] == man.bundle_id
    assert f"signed by trusted key {signing_key.key_id}" in summary["bundle_signature"]
    # Configured by the bundle's own verified playbooks, not by this checkout's.
    assert Path(summary["playbooks"]).parts[-1] == "playbooks"
    assert not Path(summary["playbooks"]).is_relative_to(REPO_PLAYBOOKS), summary["playbooks"]
    assert all(h["state"] == "ready" for h in summary["hosts"]), summary["hosts"]
    pushed = {p["host"]: p for p in summary["push"]}
    # Only what the first host was missing: the rest of the interrupted file and what followed.
    assert pushed[first.name]["resumed_files"] == 1
    meta_bytes = len(manifest_bytes) + len(signature) + len(checksums)
    assert pushed[first.name]["sent_bytes"] == man.total_size - held_bytes + meta_bytes
    assert pushed[second.name]["sent_bytes"] >= man.total_size
    assert "MB/s" in proc.stdout
    changed = {h["name"]: h["changed"] for h in summary["hosts"]}
    assert changed[second.name] > 0  # libnuma1 again, from the bundle's apt repository

    # 3. On every host: the bundle is byte for byte the signed one, the package is back.
    for host in lab_hosts.hosts:
        out = _host_ssh(
            lab_hosts,
            host,
            f"cd {HOST_BUNDLES}/{man.bundle_id[:24]} "
            "&& sha256sum --quiet --strict -c bundle.sha256 "
            f"&& sha256sum {MANIFEST} {SIGNATURE} && dpkg-query -W -f='${{Status}}\\n' libnuma1",
        )
        sums = dict(reversed(line.split()) for line in out.splitlines()[:2])
        assert sums[SIGNATURE] == hashlib.sha256(signature).hexdigest()
        assert out.splitlines()[-1] == "install ok installed"
