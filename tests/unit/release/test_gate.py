"""The canary's gate: each canary engine alone among its stage behind its own host's gateway
(pinned with that gateway's drain file, written by the real ssh command line run here), asked
with `X-Release-Stage: canary`, and passed only when the gateway says the canary answered."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from installer.day2 import drain
from installer.hosts.ssh import Target
from installer.inventory import Inventory, load_inventory
from installer.release import gate

CANARIES = {"a": ["a-canary"], "b": ["b-canary"]}


class InFolder(Target):
    """The host's /etc/private-llm is a folder of its own here."""

    root: Path = Path()

    def ssh_argv(self, command: str | None = None) -> list[str]:
        folder = self.root / self.name
        folder.mkdir(exist_ok=True)
        return ["bash", "-c", (command or "").replace("/etc/private-llm/", f"{folder}/")]


@pytest.fixture
def gateways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Inventory, list[dict], dict]]:
    """A gateway on 127.0.0.1 (host a) and 127.0.0.2 (host b): /readyz from its drain file, and
    a completion answered by a ready engine of the asked stage (stable when none is)."""
    asked: list[dict] = []
    broken: dict[str, bool] = {"canary": False}

    class Handler(BaseHTTPRequestHandler):
        def _ready(self) -> dict[str, bool]:
            host = "a" if self.server.server_address[0] == "127.0.0.1" else "b"  # type: ignore[index]
            f = tmp_path / host / "drain.json"
            drained = set(json.loads(f.read_text())["engines"]) if f.is_file() else set()
            return {n: n not in drained for n in ("a", "b", "a-canary", "b-canary")}

        def _send(self, body: dict, headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            for k, v in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send({"status": "ready", "engines": self._ready(), "outstanding": {}}, {})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            want = self.headers.get("X-Release-Stage", "stable")
            ready = [n for n, ok in self._ready().items() if ok and n.endswith("-canary") == (want == "canary")]
            stage = want if ready and not broken["canary"] else "stable"
            asked.append({"stage_header": want, "ready": ready, "answered": stage})
            self._send({"choices": [{"message": {"content": "hi"}}]}, {"x-release-stage": stage})

        def log_message(self, *args: object) -> None:
            pass

    first = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = first.server_address[1]
    second = ThreadingHTTPServer(("127.0.0.2", port), Handler)
    for s in (first, second):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "site.yml").write_text(
        "deployment: demo\nhosts: [{name: a, address: 127.0.0.1}, {name: b, address: 127.0.0.2}]\n"
        f"model: {{path: weights, served_name: tiny}}\nengine: {{device: cpu}}\ntls: {{mode: 'off'}}\n"
        f"ports: {{gateway: {port}}}\n"
    )
    InFolder.root = tmp_path
    monkeypatch.setattr(drain, "target", lambda inv, host: InFolder(host.name, host.address, "root", 22, None, None))
    monkeypatch.setattr(drain, "REREAD_S", 0.0)
    monkeypatch.setattr(gate, "PROOF_PAUSE_S", 0.0)
    try:
        yield load_inventory(tmp_path / "site.yml"), asked, broken
    finally:
        for s in (first, second):
            s.shutdown()
            s.server_close()


def test_each_canary_is_proven_alone_through_its_own_gateway(gateways: tuple[Inventory, list[dict], dict]) -> None:
    inv, asked, _ = gateways
    assert gate.prove_stage(inv, CANARIES, "canary", "tiny", "generate", "secret") == {}
    # Host a's gateway pinned to a-canary (b-canary drained there), then b's to b-canary.
    assert asked == [
        {"stage_header": "canary", "ready": ["a-canary"], "answered": "canary"},
        {"stage_header": "canary", "ready": ["b-canary"], "answered": "canary"},
    ]
    root = InFolder.root
    for host in ("a", "b"):  # unpinned after
        assert json.loads((root / host / "drain.json").read_text()) == {"engines": []}


def test_a_canary_the_gateway_falls_back_from_fails_its_gate(gateways: tuple[Inventory, list[dict], dict]) -> None:
    inv, asked, broken = gateways
    broken["canary"] = True  # the gateway answers from stable
    problems = gate.prove_stage(inv, CANARIES, "canary", "tiny", "generate", "secret")
    assert set(problems) == {"a"}  # the first failure stops the gate
    assert "answered with X-Release-Stage: 'stable' (wanted 'canary')" in problems["a"]
    assert len(asked) == gate.PROOF_ATTEMPTS


def test_an_engine_drained_after_its_proof_is_not_drained_during_it(
    gateways: tuple[Inventory, list[dict], dict], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """promote proves each stable engine reconfigured to the canary's spec while every stable
    engine stays drained afterwards: the one proved must be ready meanwhile."""
    inv, asked, _ = gateways
    monkeypatch.setattr(gate, "STARTING_ENGINE_TIMEOUT_S", 2.0)
    stable = {"a": ["a"], "b": ["b"]}
    assert gate.prove_stage(inv, stable, "stable", "tiny", "generate", "secret", drained_after=["a", "b"]) == {}
    assert [q["ready"] for q in asked] == [["a"], ["b"]]
    for host in ("a", "b"):
        assert json.loads((InFolder.root / host / "drain.json").read_text()) == {"engines": ["a", "b"]}
