"""Prometheus, configured by the monitoring role's own template, really scrapes a gateway whose
metrics need the scrape token: the gateway's /metrics and an engine relayed by it are up with the
token the role points Prometheus at, and down as soon as that file holds another token
(Prometheus reads it at every scrape). Real `prometheus` (Debian's package) and `python -m service`
on loopback."""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.engine_metrics import metrics_engine
from tests.support.loopback import free_port, stop
from tests.support.monitoring_render import inventory_vars, render

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _query(prom: str, promql: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)["data"]["result"]  # type: ignore[no-any-return]


def _wait_for(prom: str, promql: str, want: dict[str, str], timeout: float = 30) -> None:
    """Until the query gives exactly `want` ({job: value}), or fail with what it gave."""
    deadline = time.monotonic() + timeout
    got: dict[str, str] = {}
    while time.monotonic() < deadline:
        try:
            got = {s["metric"]["job"]: s["value"][1] for s in _query(prom, promql)}
        except OSError:
            got = {}
        if got == want:
            return
        time.sleep(0.3)
    pytest.fail(f"{promql}: wanted {want} within {timeout} s, last got {got}")


def test_prometheus_scrapes_gateway_and_relay_only_with_the_token(
    start_upstream: Any, start_gateway: Any, keys: Any, scrape_token: Any, tmp_path: Path
) -> None:
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("prometheus is missing: `sudo bash .ci/setup` installs Debian's prometheus packages")
    with metrics_engine() as engine_url:
        gateway = start_gateway({
            "keys_file": str(keys.hosts_file), "metrics_token_file": str(scrape_token.file),
            "engines": [{"name": "e1", "url": start_upstream().url, "model": "tiny"},
                        {"name": "gw", "url": engine_url, "model": "other"}],
        }, wait_ready=False)
        # Prometheus's copy of the token, where the role's task puts it (from the same generated file).
        prom_token = tmp_path / "prometheus-scrape.token"
        shutil.copy(scrape_token.file, prom_token)
        prom_port = free_port()
        variables = inventory_vars(
            {"gw": "127.0.0.1"}, ["gw"], _monitoring_token_file=str(prom_token),
            monitoring_scrape_interval="1s", monitoring_prometheus_port=prom_port,
        )
        variables["gateway_port"] = int(gateway.url.rsplit(":", 1)[1])
        (tmp_path / "prometheus.yml").write_text(render("prometheus.yml.j2", **variables))
        with (tmp_path / "prometheus.log").open("wb") as log:
            proc = subprocess.Popen(
                [exe, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=subprocess.DEVNULL, stderr=log,
            )
        prom = f"http://127.0.0.1:{prom_port}"
        try:
            # The gateway's own metrics and the engine it relays: up, with the token.
            _wait_for(prom, 'up{job=~"gateway|vllm"}', {"gateway": "1", "vllm": "1"})
            relayed = _query(prom, 'vllm:num_requests_waiting{pli_engine="gw"}')
            assert [s["value"][1] for s in relayed] == ["3"], relayed
            prom_token.write_text("0" * 64 + "\n")  # another token: the next scrapes are refused
            _wait_for(prom, 'up{job=~"gateway|vllm"}', {"gateway": "0", "vllm": "0"})
        finally:
            stop(proc)
