"""Grafana dashboards: valid JSON with what operators look for, and every PromQL expression in
them parses (promtool checks them as recording rules, after Grafana's variables are filled in)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DASHBOARDS = sorted((Path(__file__).parents[3] / "playbooks/roles/monitoring/files/dashboards").glob("*.json"))
# Grafana's variables, replaced the way Grafana would before sending a query.
_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$host": ".*", "$engine": ".*"}


def _targets(dashboard: dict) -> list[tuple[str, str]]:
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    return found


def _expand(expr: str) -> str:
    for name, value in sorted(_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


def test_there_are_dashboards() -> None:
    assert {p.name for p in DASHBOARDS} >= {"serving.json", "gpu-hosts.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_json_is_complete(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']}: no query"
        assert panel["datasource"]["uid"] == "pli-prometheus"  # the provisioned datasource
        for target in panel["targets"]:
            assert not re.search(r"\$(?!__rate_interval|__interval|host|engine)\w+", target["expr"]), target["expr"]


def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is missing: `sudo bash .ci/setup` installs Debian's prometheus package")
    rules = []
    for path in DASHBOARDS:
        for i, (title, expr) in enumerate(_targets(json.loads(path.read_text()))):
            rules.append({"record": f"dashboard:{path.stem.replace('-', '_')}:{i}", "expr": _expand(expr),
                          "labels": {"panel": title}})
    assert len(rules) > 20
    (tmp_path / "exprs.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    proc = subprocess.run([exe, "check", "rules", str(tmp_path / "exprs.yml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboards_show_what_the_issue_asks_for() -> None:
    exprs = " ".join(e for p in DASHBOARDS for _, e in _targets(json.loads(p.read_text())))
    for metric in (
        "pli_gateway_requests_total", "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
        "vllm:generation_tokens_total", "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting",
        "pli_gpu_memory_used_bytes", "pli_gpu_utilization_ratio", "pli_gpu_temperature_celsius",
    ):
        assert metric in exprs, metric
    assert "by (host, pli_engine" in exprs and "by (host)" in exprs  # per engine and per host


def test_a_broken_expression_is_caught(tmp_path: Path) -> None:
    """The parse check above is real: promtool refuses a malformed expression."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is missing")
    bad = {"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": "sum by (host (rate(up[1m]))"}]}]}
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run([exe, "check", "rules", str(tmp_path / "bad.yml")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode != 0
