"""The keepalived role's keepalived.conf as rendered from an inventory's frontend (#37 item 1):
unicast to the other gateway hosts only, VRRPv3 with no password on the wire, the health check
on the host's own /readyz with the deployment CA, and nothing at all without a frontend."""

import shlex
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from installer.ansible import keepalived_vars
from installer.inventory import Inventory
from installer.planning import plan
from tests.support.keepalived_role import CHECK_SCRIPT, ROLE, keepalived_conf


def _plan(tmp: Path, tls: str = "issue", **frontend: object) -> plan.DeploymentPlan:
    (tmp / "w").mkdir(exist_ok=True)
    (tmp / "w" / "config.json").write_text("{}")
    inv = Inventory.model_validate({
        "deployment": "demo", "engine": {"device": "cpu"}, "model": {"path": str(tmp / "w"), "served_name": "tiny"},
        "hosts": [{"name": f"h{i}", "address": f"10.0.0.{i}"} for i in (1, 2, 3)],
        "frontend": {"vip": "10.0.0.100/24", "router_id": 51, **frontend}, "tls": {"mode": tls},
    })
    return plan.build(inv)


def _conf(tmp: Path, host: str = "h2", tls: str = "issue", **frontend: object) -> str:
    p = _plan(tmp, tls, **frontend)
    hp = next(h for h in p.hosts if h.name == host)
    variables = {**keepalived_vars.group_vars(p), **keepalived_vars.host_vars(p, hp.gateway_url)}
    return keepalived_conf(host, "eth0", variables)


def test_unicast_to_the_other_gateway_hosts(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    peers = conf.split("unicast_peer {", 1)[1].split("}", 1)[0].split()
    assert peers == ["10.0.0.1", "10.0.0.3"]
    assert "unicast_src_ip 10.0.0.2" in conf and "check_unicast_src" in conf
    assert "virtual_router_id 51" in conf and "priority 198" in conf
    assert "10.0.0.100/24 dev eth0" in conf
    assert "state BACKUP" in conf and "nopreempt" in conf


def test_vrrp3_and_no_password_on_the_wire(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    assert "vrrp_version 3" in conf
    settings = [line.split("#", 1)[0] for line in conf.splitlines()]
    assert not any("authentication" in line or "auth_pass" in line for line in settings)


def test_health_check_asks_the_hosts_own_gateway_over_https(tmp_path: Path) -> None:
    conf = _conf(tmp_path, check_interval_s=3, advert_interval_s=0.3)
    assert ("/etc/keepalived/pli_readyz_check.py https://10.0.0.2:8080/readyz 2 /etc/private-llm/tls/ca.pem\""
            in conf)
    assert "interval 3\n" in conf and "timeout 6" in conf and "advert_int 0.3" in conf and "fall 2" in conf
    assert "enable_script_security" in conf and "script_user private-llm" in conf


def test_the_role_does_nothing_without_a_frontend_but_let_go_of_an_old_one() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    assert tasks[0]["when"].startswith("keepalived_vip | length > 0")
    # without one, a host that held a frontend stops advertising it (only where our config is)
    let_go = tasks[1]
    assert let_go["when"] == f"not ({tasks[0]['when']})"
    stop = next(t for t in let_go["block"] if "ansible.builtin.systemd_service" in t)
    assert stop["ansible.builtin.systemd_service"] == {"name": "keepalived", "enabled": False, "state": "stopped"}
    assert stop["when"] == "__keepalived_conf.stat.exists"
    assert yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["keepalived_vip"] == ""


def test_with_tls_off_the_check_gets_its_timeout_and_no_ca_and_runs(tmp_path: Path) -> None:
    """keepalived splits the script line on spaces and drops empty words: with the CA before the
    timeout, TLS off shifted the timeout into the CA's place (review). Now the line's words are
    the script's arguments in order, and they run: 0 for a 200, 1 for a 503."""
    conf = _conf(tmp_path, tls="off", check_interval_s=3)
    line = next(x for x in conf.splitlines() if x.strip().startswith("script "))
    argv = shlex.split(line.strip().removeprefix("script "))[0].split()
    assert argv == ["/usr/bin/python3", "-I", "/etc/keepalived/pli_readyz_check.py",
                    "http://127.0.0.1:8080/readyz", "2"]

    status = {"code": 200}

    class Readyz(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status["code"])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Readyz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/readyz"
        run = ["python3", "-I", str(CHECK_SCRIPT), url, *argv[4:]]
        assert subprocess.run(run, capture_output=True, timeout=10, check=False).returncode == 0
        # the earlier order (URL CA TIMEOUT), which the new script meets under the old
        # keepalived.conf until keepalived reloads in an upgrade (review): still a passing check
        earlier = ["python3", "-I", str(CHECK_SCRIPT), url, "/etc/private-llm/tls/ca.pem", "2"]
        assert subprocess.run(earlier, capture_output=True, timeout=10, check=False).returncode == 0
        status["code"] = 503
        assert subprocess.run(run, capture_output=True, timeout=10, check=False).returncode == 1
        assert subprocess.run(earlier, capture_output=True, timeout=10, check=False).returncode == 1
    finally:
        server.shutdown()
