"""The stages file as every gateway host gets it (the real ssh argv's command, run here), and
the gateways' /metrics read with the scrape token."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from installer.base import paths
from installer.hosts.ssh import Target
from installer.inventory import Inventory, ReleaseSettings, load_inventory
from installer.release import metrics, scrape, stages
from installer.release.state import ReleaseError
from installer.secrets import secret_files
from service import stages as gateway_stages
from tests.support.local_hosts import DownHost, HereHost

DATA = Path(__file__).parent / "data"


def _inventory(tmp_path: Path, port: int = 8080) -> Inventory:
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "weights" / "config.json").write_text("{}")
    site = tmp_path / "site.yml"
    site.write_text(
        "deployment: demo\nhosts: [{name: a, address: 127.0.0.1}, {name: b, address: 127.0.0.2}]\n"
        f"model: {{path: weights, served_name: tiny}}\nengine: {{device: cpu}}\ntls: {{mode: 'off'}}\n"
        f"ports: {{gateway: {port}}}\n"
    )
    return load_inventory(site)


def test_stages_file_is_the_designs_schema() -> None:
    text = stages.content({"tiny-llama": stages.Split(20, "key", 10), "embed": stages.Split(0, "session")})
    assert json.loads(text) == {"models": {
        "embed": {"weights": {"stable": 100, "canary": 0}, "sticky": "session"},
        "tiny-llama": {"weights": {"stable": 80, "canary": 20}, "sticky": "key", "first_byte_timeout_s": 10},
    }}
    assert json.loads(stages.content({})) == {"models": {}}  # no release: every model 100% stable
    assert stages.STAGES_FILE == "/etc/private-llm/stages.json"
    with pytest.raises(ValueError, match="not a percentage"):
        stages.content({"x": stages.Split(120)})


def test_every_gateway_host_gets_the_file_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = _inventory(tmp_path)

    class InFolder(Target):  # each host's file system is a folder of its own here
        def ssh_argv(self, command: str | None = None) -> list[str]:
            (tmp_path / self.name).mkdir(exist_ok=True)
            return ["bash", "-c", f"cd {tmp_path / self.name} && {command}"]

    monkeypatch.setattr(stages, "target", lambda inv, host: InFolder(host.name, host.address, "root", 22, None, None))
    stages.write(inv, {"tiny": stages.Split(50)}, path="stages.json")
    for host in ("a", "b"):
        out = tmp_path / host / "stages.json"
        assert json.loads(out.read_text())["models"]["tiny"]["weights"] == {"stable": 50, "canary": 50}
        assert oct(out.stat().st_mode & 0o777) == "0o644"
        assert not out.with_name("stages.json.tmp").exists()


def test_a_host_that_cannot_be_told_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = _inventory(tmp_path)

    def pick(inv: Inventory, host: object) -> Target:
        name = host.name  # type: ignore[attr-defined]
        cls = DownHost if name == "b" else HereHost
        return cls(name, "10.9.9.9" if name == "b" else "127.0.0.1", "root", 22, None, None)

    monkeypatch.setattr(stages, "target", pick)
    with pytest.raises(stages.StagesError) as exc:
        stages.write(inv, {"tiny": stages.Split(20)}, path=str(tmp_path / "stages.json"))
    assert any(d.startswith("b: ssh: connect to host 10.9.9.9") for d in exc.value.details), exc.value.details


@pytest.fixture
def gateway() -> Iterator[tuple[int, list[str | None]]]:
    """A /metrics endpoint answering a recorded scrape to the right bearer token only."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            ok = self.path == "/metrics" and self.headers.get("Authorization") == "Bearer " + "t" * 64
            body = (DATA / "errors-after-gw1.txt").read_bytes() if ok else b"{}"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()


def test_scrape_reads_each_gateway_with_the_token(
    tmp_path: Path, gateway: tuple[int, list[str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, seen = gateway
    paths.use_state_dir(tmp_path / "state")
    try:
        inv = _inventory(tmp_path, port)
        with pytest.raises(ReleaseError, match="no scrape token"):
            scrape.scrape(inv, at=0)
        secret_files.metrics_token_file("demo").parent.mkdir(parents=True)
        secret_files.metrics_token_file("demo").write_text("t" * 64 + "\n")
        got = scrape.scrape(inv, at=5, timeout_s=2)
    finally:
        paths.use_state_dir(None)
    assert seen == ["Bearer " + "t" * 64]  # host b (127.0.0.2) has no gateway here
    assert got.at == 5 and set(got.gateways) == {"a"}
    assert "gateway unreachable" in got.problems["b"]
    assert metrics.figures(got.gateways["a"], "tiny-llama", "canary").requests == 110


def test_the_gateway_reads_the_file_the_installer_writes() -> None:
    read = gateway_stages.parse(stages.content({"tiny": stages.Split(20, "session", 4)}))
    assert read["tiny"].canary == 20 and read["tiny"].sticky == "session"


def test_a_models_release_settings_give_both_canary_deadlines_to_the_gateway() -> None:
    settings = ReleaseSettings.model_validate(
        {"sticky": "session", "slo": {"canary_first_byte_timeout_s": 3, "canary_answer_timeout_s": 45}}
    )
    read = gateway_stages.parse(stages.content({"tiny": stages.split(50, settings)}))
    assert read["tiny"] == gateway_stages.Split(50, "session", 3.0, 45.0)
    # Unset, a whole canary answer gets two minutes: most generations end well within that.
    assert stages.split(20, ReleaseSettings()).answer_timeout_s == 120
