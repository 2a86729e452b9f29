"""The weights fan-out against N copies through the control link, with real processes on loopback.

    .venv/bin/python -m benchmarks.weights_fanout --size-gb 1 --files 8 --hosts 4 [--rounds 1]

Each "host" is a folder and an address of its own (127.0.0.11, .12, ...; Linux routes all of
127/8 to lo) with a certificate of a deployment CA made here, and runs the same two processes a
host runs: `weights/serve.py` (mutual TLS, this run's token) and `weights/verify.py fetch`. The
control machine is serve.py on 127.0.0.1 over the source folder. Three runs per round:

  - fanout: the control machine feeds the first host, each host feeds the next ones
    (installer/weights/fanout.py, degree 2), every host starts at once;
  - chain:  the same with degree 1;
  - star:   every host fetches from the control machine at once: N copies through its link,
    what today's push does (same transport here, so only the shape differs);
  - one:    one host from the control machine (the "4 against 1" baseline).

Control-link bytes are what the control machine's server counted. On this machine every host
shares the same CPUs and the loopback, so without a cap TLS and hashing, not a link, are the
bottleneck; `--uplink-mb-s` caps every machine's sending rate below what the CPUs do, which is
what a network whose links are slower than the hosts looks like. Results: benchmarks/results/weights_fanout-*.json.

The class FanoutLab is the harness the integration test uses too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from installer.tls import ca  # noqa: E402
from installer.weights import fanout  # noqa: E402

WEIGHTS = REPO / "installer" / "weights"
# the hosts' interpreter: no venv, so a third-party import would fail here as it would there
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else (shutil.which("python3") or sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(root: Path, size: int, files: int) -> Path:
    """A folder of `files` random shards totalling `size` bytes, and its signed-style list."""
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    each = size // files
    block = os.urandom(1 << 20)
    for i in range(files):
        with (root / f"model-{i:05d}-of-{files:05d}.safetensors").open("wb") as fh:
            left = each
            fh.write(os.urandom(16))  # every shard differs
            left -= 16
            while left > 0:
                fh.write(block[: min(len(block), left)])
                left -= min(len(block), left)
    manifest = root.parent / "weights.json"
    out = subprocess.run([PYTHON, "-I", str(WEIGHTS / "verify.py"), "describe", "--root", str(root)],
                         capture_output=True, text=True, check=True)
    manifest.write_text(out.stdout)
    return manifest


@dataclass
class Node:
    name: str
    address: str
    home: Path
    server: subprocess.Popen | None = None
    fetcher: subprocess.Popen | None = None
    started: float = 0.0
    finished: float = 0.0

    @property
    def model(self) -> Path:
        return self.home / "model"

    @property
    def stats(self) -> Path:
        return self.home / "served.json"

    @property
    def progress(self) -> Path:
        return self.home / "fetched.json"


@dataclass
class FanoutLab:
    work: Path
    source: Path  # the control machine's copy
    manifest: Path
    limit_mb_s: float = 0.0
    deadline_s: int = 600
    port: int = field(default_factory=free_port)
    nodes: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.authority = ca.create_ca("fanout-lab")
        (self.work / "ca.pem").write_bytes(self.authority.cert_pem)
        self.token = self.work / "token"
        self.token.write_text(os.urandom(24).hex() + "\n")
        self.token.chmod(0o600)
        self.control = self._node(fanout.CONTROL, "127.0.0.1", self.work / "control")

    def _node(self, name: str, address: str, home: Path) -> Node:
        home.mkdir(parents=True, exist_ok=True)
        issued = ca.issue_server(self.authority, name, [name], [address], days=1)
        (home / "cert.pem").write_bytes(issued.cert_pem)
        (home / "key.pem").write_bytes(issued.key_pem)
        (home / "key.pem").chmod(0o600)
        node = Node(name, address, home)
        self.nodes[name] = node
        return node

    def host(self, name: str, index: int) -> Node:
        return self._node(name, f"127.0.0.{11 + index}", self.work / name)

    def url(self, name: str) -> str:
        return f"https://{self.nodes[name].address}:{self.port}/"

    def serve(self, node: Node, root: Path | None = None) -> None:
        argv = [PYTHON, "-I", str(WEIGHTS / "serve.py"), "--root", str(root or node.model),
                "--manifest", str(self.manifest), "--bind", node.address, "--port", str(self.port),
                "--cert", str(node.home / "cert.pem"), "--key", str(node.home / "key.pem"),
                "--ca", str(self.work / "ca.pem"), "--token-file", str(self.token),
                "--deadline-s", str(self.deadline_s), "--stats", str(node.stats)]
        if self.limit_mb_s:
            argv += ["--limit-mb-s", str(self.limit_mb_s)]
        node.server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = node.server.stdout.readline() if node.server.stdout else ""
        if '"ok": true' not in line:
            err = node.server.stderr.read() if node.server.stderr else ""
            raise RuntimeError(f"{node.name}: serve.py did not start: {line} {err}")

    def fetch(self, node: Node, sources: list[str], wait_s: float = 120, workers: int | None = None) -> None:
        argv = [PYTHON, "-I", str(WEIGHTS / "verify.py"), "fetch", "--root", str(node.model),
                "--manifest", str(self.manifest), "--ca", str(self.work / "ca.pem"),
                "--cert", str(node.home / "cert.pem"), "--key", str(node.home / "key.pem"),
                "--token-file", str(self.token), "--wait-s", str(wait_s), "--progress", str(node.progress),
                "--cache", str(node.home / "cache.json")]
        for source in sources:
            argv += ["--url", self.url(source)]
        if workers:
            argv += ["--workers", str(workers)]
        node.started, node.finished = time.monotonic(), 0.0
        node.fetcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, node: Node, timeout: float = 600) -> tuple[int, dict]:
        assert node.fetcher is not None
        out, err = node.fetcher.communicate(timeout=timeout)
        node.finished = time.monotonic()
        try:
            return node.fetcher.returncode, json.loads(out)
        except ValueError:
            return node.fetcher.returncode, {"stdout": out, "stderr": err}

    def kill(self, node: Node) -> None:
        """SIGKILL, as a host that dies: no handler runs, sockets are cut by the kernel."""
        for proc in (node.fetcher, node.server):
            if proc and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()

    def read(self, path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def served(self, name: str) -> int:
        return int(self.read(self.nodes[name].stats).get("total", 0))

    def stop(self) -> None:
        for node in self.nodes.values():
            for proc in (node.fetcher, node.server):
                if proc and proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()

    def run(self, plan: fanout.Plan) -> dict:
        """Every host of the plan at once, each serving what it verifies; wall time until all
        have verified their copy, and the bytes the control machine sent."""
        self.serve(self.control, self.source)
        for i, name in enumerate(plan.order):
            node = self.nodes.get(name) or self.host(name, i)
            self.serve(node)
        start = time.monotonic()
        for name in plan.order:
            # a star is N copies from the control machine: no host may help another
            only = [fanout.CONTROL] if plan.parent[name] == fanout.CONTROL else None
            self.fetch(self.nodes[name], only or fanout.sources(plan, name))
        results = {name: self.wait(self.nodes[name]) for name in plan.order}
        wall = time.monotonic() - start
        time.sleep(0.6)  # the servers' stats are rewritten at most twice a second
        control = self.served(fanout.CONTROL)
        names = {self.url(n).rstrip("/"): n for n in self.nodes}
        links = [fanout.Link(names.get(self.read(self.nodes[n].progress).get("source", ""), "?"), n,
                             results[n][1].get("fetched_bytes", 0), results[n][1].get("fetched_bytes", 0),
                             self.nodes[n].finished - self.nodes[n].started) for n in plan.order]
        self.stop()
        return {"wall_s": round(wall, 3), "control_bytes": control,
                "ok": all(code == 0 for code, _ in results.values()),
                "hosts": {n: {"seconds": round(self.nodes[n].finished - self.nodes[n].started, 3),
                              "fetched_bytes": results[n][1].get("fetched_bytes"),
                              "source": names.get(self.read(self.nodes[n].progress).get("source", ""))}
                          for n in plan.order},
                "display": fanout.progress_lines(links)}


def star(hosts: list[str]) -> fanout.Plan:
    """Every host straight from the control machine: today's N copies through its link."""
    return fanout.Plan(tuple(hosts), {h: fanout.CONTROL for h in hosts})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--degree", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--uplink-mb-s", type=float, default=0.0,
                        help="cap every machine's serving rate (serve.py --limit-mb-s): a link slower than the CPUs")
    parser.add_argument("--work", default="/var/tmp/pli-weights-fanout")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    size = int(args.size_gb * 1e9)
    manifest = make_model(work / "source" / "model", size, args.files)
    hosts = [f"h{i + 1}" for i in range(args.hosts)]
    runs: list[dict] = []
    shapes = {"fanout": fanout.plan(hosts, args.degree), "chain": fanout.plan(hosts, 1),
              "star": star(hosts), "one": star(hosts[:1])}
    for r in range(args.rounds):
        names = list(shapes) if r % 2 == 0 else list(reversed(shapes))
        for shape in names:
            lab = FanoutLab(work / f"run-{r}-{shape}", work / "source" / "model", manifest,
                            limit_mb_s=args.uplink_mb_s)
            try:
                result = {"round": r, "shape": shape, **lab.run(shapes[shape])}
            finally:
                lab.stop()
            shutil.rmtree(lab.work, ignore_errors=True)
            print(json.dumps(result), flush=True)
            runs.append(result)
    model_bytes = sum(e["size"] for e in json.loads(manifest.read_text())["files"])
    out = {"model_bytes": model_bytes, "files": args.files + 1, "hosts": args.hosts, "degree": args.degree,
           "uplink_mb_s": args.uplink_mb_s,
           "cpus": os.cpu_count(), "load_at_end": os.getloadavg(), "machine": platform.platform(), "runs": runs}
    results = REPO / "benchmarks" / "results"
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    (results / f"weights_fanout-{stamp}.json").write_text(json.dumps(out, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
