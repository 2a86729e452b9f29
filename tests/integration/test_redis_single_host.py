"""A deployment of one serving host keeps its Redis: the plan's Redis variables, rendered by real
Ansible through the redis role's template and the gateway's URL, give a redis-server on
loopback with a password, which the gateway (real uvicorn) records usage and enforces a quota
in, and which the control machine's report reads."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from installer.ansible import render
from installer.bundle.manifest import Manifest
from installer.flows.usage import rows
from installer.inventory import load_inventory
from installer.planning import plan as deployment_plan
from installer.secrets import secret_files
from tests.support import REPO
from tests.support.loopback import free_port
from tests.support.redis_server import redis_server
from tests.support.usage_report import usage_report

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_PLAY = """
- hosts: all
  gather_facts: false
  vars_files: [{defaults}]
  tasks:
    - ansible.builtin.template:
        src: {template}
        dest: {out}/redis.conf
        mode: "0600"
    - ansible.builtin.copy:
        content: "{{{{ gateway_redis_url }}}}"
        dest: {out}/redis_url
        mode: "0600"
"""


def _rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str, str]:
    """(the plan's Redis variables, redis.conf and the gateway's URL as Ansible renders them)."""
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    site.write_text(f"deployment: solo\nmodel: {{path: w, served_name: tiny}}\nengine: {{device: cpu}}\n"
                    f"hosts: [{{name: h1, address: 10.0.0.1}}]\nports: {{redis: {free_port()}}}\n")
    inv = load_inventory(site)
    dp = deployment_plan.build(inv)
    secret_files.prepare(dp)  # as the flows do before rendering
    gv = render.group_vars(dp, Manifest(target={}, components={}, packages=[]))
    wanted = {k: v for k, v in gv.items() if k.startswith("redis_") or k in ("gateway_redis_url", "pli_tls_dir")}
    out = tmp_path / "rendered"
    out.mkdir()
    play = tmp_path / "play.yml"
    role = REPO / "playbooks/roles/redis"
    play.write_text(_PLAY.format(defaults=role / "defaults/main.yml", template=role / "templates/redis.conf.j2",
                                 out=out))
    (tmp_path / "vars.json").write_text(json.dumps(wanted))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'vars.json'}", str(play)],
        capture_output=True, text=True, timeout=90, check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return wanted, (out / "redis.conf").read_text(), (out / "redis_url").read_text()


def test_one_serving_host_gets_a_loopback_redis_that_records_usage_and_enforces_quotas(
    start_upstream: Any, start_gateway: Any, keys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gv, conf, url = _rendered(tmp_path, monkeypatch)
    password = Path(gv["redis_password_file"]).read_text()
    port = gv["redis_port"]
    assert "bind 127.0.0.1\n" in conf and f"port {port}\n" in conf and "tls-port" not in conf
    assert f"requirepass {password}\n" in conf
    assert url == f"redis://:{password}@127.0.0.1:{port}/0"

    data = tmp_path / "redis"
    data.mkdir()
    with redis_server(data, port=port, config=tmp_path / "rendered" / "redis.conf"):
        with pytest.raises(redis.exceptions.AuthenticationError):  # the password is required
            redis.Redis(host="127.0.0.1", port=port).ping()
        upstream = start_upstream(model="tiny")
        secret = keys.create("team", quota_tokens=60, quota_period="day")
        config = {"keys_file": str(keys.hosts_file), "limits": {"redis_url": url},
                  "engines": [{"name": "h1", "url": upstream.url, "model": "tiny"}]}
        gateway = start_gateway(config)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "count these words"}], "max_tokens": 8}
        used, statuses = 0, []
        for _ in range(12):
            resp = httpx.post(gateway.url + "/v1/chat/completions", json=body,
                              headers={"Authorization": f"Bearer {secret}"}, timeout=30)
            statuses.append(resp.status_code)
            if resp.status_code != 200:
                break
            used += resp.json()["usage"]["total_tokens"]
        assert statuses[-1] == 429 and set(statuses[:-1]) == {200}, statuses
        assert resp.json()["error"]["code"] == "quota_exceeded"
        report = usage_report(tmp_path / "gateway-0.yaml")
    [row] = rows(report, ("key",))
    assert row["key"] == "team" and row["requests"] == len(statuses) - 1
    assert row["total_tokens"] == used
    assert [(q["key"], q["used"]) for q in report.quotas] == [("team", used)]
