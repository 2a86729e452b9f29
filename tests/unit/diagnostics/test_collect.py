"""`installer doctor --collect`'s flow (installer/diagnostics/collect.py): the real host script
through each host's ssh argv (here: `bash -c` on this machine, as tests/unit/gpu/test_gpu_checks.py
does for the GPU doctor), a host that cannot be reached, and the whole collect against a
Prometheus and gateway stand-in on loopback, with a secret of the deployment on the control
machine cut from what the hosts sent."""

import json
import tarfile
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from installer.cli import _register, app
from installer.diagnostics import collect
from installer.hosts.ssh import Target
from installer.inventory.models import Inventory
from tests.support.local_hosts import DownHost, HereHost


def _inventory(port: int) -> Inventory:
    return Inventory.model_validate({
        "deployment": "demo", "model": {"path": "/m", "served_name": "tiny"},
        "hosts": [{"name": "h1", "address": "127.0.0.1", "ssh": {"user": "root", "port": 1}}],
        "ports": {"engine": 1, "gateway": port}, "tls": {"mode": "off"}, "monitoring": {"prometheus_port": port},
    })


def test_a_host_gives_its_files_and_an_unreachable_one_says_why(tmp_path: Path) -> None:
    cfg = tmp_path / "etc"
    cfg.mkdir()
    (cfg / "e2e.env").write_text("REDIS_PASSWORD=hunter2hunter2\n")
    args = ["--journal-lines", "3", "--config-dir", str(cfg), "--state-dir", str(tmp_path), "--root", str(tmp_path),
            "--expect", f"{tmp_path}/release.json"]
    here = collect.run_on_host(HereHost("a", "10.0.0.9", "root", 22, None, None), args)
    assert here.files[f"config{cfg}/e2e.env"] == b"REDIS_PASSWORD=hunter2hunter2\n"
    assert "_collect.json" not in here.files and "versions.json" in here.files
    assert here.missing[f"config{tmp_path}/release.json"].startswith("not on this host")
    down = collect.run_on_host(DownHost("b", "10.0.0.9", "root", 22, None, None), args)
    assert down.files == {}
    assert down.missing == {"(all)": "ssh rc 255: ssh: connect to host 10.0.0.9 port 22: No route to host: "
                                     "nothing collected from this host"}


def test_the_host_script_runs_isolated_from_modules_planted_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module another user planted where Python would look first (the script's folder, or a
    PYTHONPATH the SSH user's environment sets) never runs as root: the script runs from a folder
    of its own with `python3 -I`."""
    plant, marker = tmp_path / "plant", tmp_path / "planted-ran"
    plant.mkdir()
    names = ("argparse", "glob", "json", "shutil", "subprocess", "tarfile")
    for name in names:
        (plant / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('{name}')\n")
    monkeypatch.setenv("PYTHONPATH", str(plant))
    monkeypatch.setenv("TMPDIR", str(plant))  # mktemp -d makes the script's folder in here
    args = ["--journal-lines", "1", "--config-dir", str(tmp_path / "none"), "--state-dir", str(tmp_path),
            "--root", str(tmp_path)]
    part = collect.run_on_host(HereHost("a", "10.0.0.9", "root", 22, None, None), args)
    assert "(all)" not in part.missing and "versions.json" in part.files
    assert not marker.exists(), f"a planted module ran: {marker.read_text()}"
    # and its folder is gone afterwards
    assert sorted(p.name for p in plant.iterdir()) == sorted(f"{n}.py" for n in names)


def test_host_args_carry_the_layout_and_the_files_a_role_must_have_written() -> None:
    inv = Inventory.model_validate({
        "deployment": "demo", "model": {"path": "/m", "served_name": "tiny"},
        "hosts": [{"name": "s", "address": "10.0.0.1", "groups": ["serving"]},
                  {"name": "m", "address": "10.0.0.2", "groups": ["monitoring"]}],
    })
    serving = collect.host_args(inv, "s", 42)
    assert serving[:2] == ["--journal-lines", "42"]
    assert serving[serving.index("--config-dir") + 1] == "/etc/private-llm"
    expected = [serving[i + 1] for i, a in enumerate(serving) if a == "--expect"]
    assert expected == ["/etc/private-llm/engine.env", "/etc/private-llm/gateway.yml",
                        "/var/lib/private-llm/release.json"]
    monitoring = collect.host_args(inv, "m", 42)
    expected = [monitoring[i + 1] for i, a in enumerate(monitoring) if a == "--expect"]
    assert expected == ["/etc/prometheus/prometheus.yml"]


class _Handler(BaseHTTPRequestHandler):
    """A gateway's /readyz and Prometheus's query API as the real ones answer."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/readyz":
            self._send({"status": "ready", "engines": {"h1": True}})
        elif url.path == "/api/v1/query":
            self._send({"status": "success", "data": {"resultType": "vector", "result": []}})
        elif url.path == "/api/v1/query_range":
            assert float(query["end"][0]) - float(query["start"][0]) == 3600
            result = []
            if query["query"][0] == 'up{job="vllm"}':
                # a password in a label value: the CSV is scanned like every file
                result = [{"metric": {"host": "h1", "pli_engine": "h1", "job": "vllm",
                                      "instance": "https://probe:hunter2hunter2@h1:8443"},
                           "values": [[1796155200, "1"], [1796155230, "0"]]},
                          {"metric": {"host": "h2", "pli_engine": "h2", "job": "vllm"}, "values": [[1796155200, "1"]]}]
            self._send({"status": "success", "data": {"resultType": "matrix", "result": result}})
        else:
            self.send_error(404)


@pytest.fixture
def stand_in() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_collect_writes_the_archive_whatever_a_host_could_not_give(
    stand_in: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    inv = _inventory(stand_in)
    out = tmp_path / "out"
    out.mkdir()
    result = collect.collect(inv, journal_lines=10, output=out)
    assert result.path.parent == out and result.path.name.startswith("pli-support-demo-")
    assert result.path.stat().st_mode & 0o777 == 0o600
    with tarfile.open(result.path) as tar:
        root = tar.getmembers()[0].name
        files = {m.name[len(root) + 1:]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    manifest = json.loads(files["MANIFEST.json"])
    # the host could not be reached (ssh to a closed port): said, and the rest still collected
    assert "Connection refused" in manifest["hosts"]["h1"]["missing"]["(all)"]
    assert json.loads(files["status.json"])["rows"][0]["ready"] is True
    assert json.loads(files["hosts/h1/status.json"])["rows"][0]["host"] == "h1"
    csv_rows = files["prometheus.csv"].decode().splitlines()
    assert csv_rows[0] == "series,host,pli_engine,labels,time,value"
    assert csv_rows[1] == ("scraped,h1,h1,instance=https://probe:[REDACTED:url-password]@h1:8443;job=vllm,"
                           "2026-12-01T20:00:00Z,1")
    assert len(csv_rows) == 4 and b"hunter2" not in b"".join(files.values())
    assert files["hosts/h1/prometheus.csv"].decode().count("\nscraped,h1,") == 2  # its own rows only
    assert "h2" not in files["hosts/h1/prometheus.csv"].decode()
    # series nobody exports here (the GPU ones on a CPU deployment) are named as such
    slope = manifest["deployment_files"]["missing"]["prometheus.csv:gpu_memory_slope_bytes_per_s"]
    assert slope == "no sample in the last hour (nothing exports it here)"
    assert manifest["redactions"] == [{"file": "hosts/h1/prometheus.csv", "rule": "url-password", "count": 2},
                                      {"file": "prometheus.csv", "rule": "url-password", "count": 2}]
    assert [r.host for r in result.rows] == ["h1", "(deployment)"]


class LeakyHost(Target):
    """A host whose failure text quotes secrets: a Redis URL, and the inventory's webhook URL."""

    def ssh_argv(self, command: str | None = None) -> list[str]:
        line = f"Traceback: redis://:hunter2hunter2@10.0.0.1:6379 refused; alert to {WEBHOOK} failed"
        return ["sh", "-c", f"echo {line!r} >&2; exit 1"]


WEBHOOK = "https://pager.example.internal/v1/hook/9f8e7d6c5b4a"


def test_manifest_and_missing_are_scanned_and_the_inventory_webhook_is_known(
    stand_in: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    inv = _inventory(stand_in)
    inv = inv.model_copy(update={"monitoring": inv.monitoring.model_copy(update={"webhook_url": WEBHOOK})})
    assert collect.known_secrets(inv)["webhook-url"] == WEBHOOK
    monkeypatch.setattr(collect, "target", lambda _inv, h: LeakyHost(h.name, h.address, "root", 22, None, None))
    result = collect.collect(inv, journal_lines=10, output=tmp_path / "a.tar.gz")
    with tarfile.open(result.path) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    for name in ("MANIFEST.json", "MISSING.txt"):
        assert b"hunter2" not in files[name] and b"9f8e7d6c5b4a" not in files[name], name
    missing = json.loads(files["MANIFEST.json"])["hosts"]["h1"]["missing"]["(all)"]
    assert missing == ("ssh rc 1: Traceback: redis://:[REDACTED:url-password]@10.0.0.1:6379 refused; "
                       "alert to [REDACTED:known-webhook-url] failed: nothing collected from this host")
    reported = {(r["file"], r["rule"]): r["count"] for r in result.redactions}
    for name in ("MANIFEST.json", "MISSING.txt"):
        assert reported[(name, "url-password")] == 1 and reported[(name, "known-webhook-url")] == 1
    assert "hunter2" not in "\n".join(result.missing)


def test_cli_prints_the_summary_and_refuses_collect_without_inventory(
    stand_in: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    _register()
    inv = tmp_path / "site.yml"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    inv.write_text(
        "deployment: demo\nmodel: {path: m, served_name: tiny}\n"
        "hosts: [{name: h1, address: 127.0.0.1, ssh: {user: root, port: 1}}]\n"
        f"ports: {{engine: 1, gateway: {stand_in}}}\ntls: {{mode: 'off'}}\n"
        f"monitoring: {{prometheus_port: {stand_in}}}\n"
    )
    out = CliRunner().invoke(app, ["doctor", "--collect", "-i", str(inv), "--output", str(tmp_path / "a.tar.gz")])
    assert out.exit_code == 0, out.output
    assert "redacted prometheus.csv: url-password x2" in out.output
    assert "not collected h1: (all): ssh rc 255" in out.output
    assert f"support archive: {tmp_path / 'a.tar.gz'}" in out.output
    assert (tmp_path / "a.tar.gz").stat().st_mode & 0o777 == 0o600
    assert "hunter2" not in out.output
    refused = CliRunner().invoke(app, ["doctor", "--collect", "--local"])
    assert refused.exit_code != 0 and "--collect needs --inventory" in refused.output
