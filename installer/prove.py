"""The last word of `installer up`: from this machine, each host's gateway answers a real chat
completion with the installer's own API key — the path a client takes, end to end."""

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from installer.inventory import Inventory


@dataclass(frozen=True)
class Proof:
    host: str
    endpoint: str
    ok: bool
    detail: str
    latency_ms: float | None = None


def _request(url: str, secret: str, body: dict | None, timeout: float) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={
        "Authorization": f"Bearer {secret}", "Content-Type": "application/json",
    })
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.load(exc)
        except ValueError:
            return exc.code, {}


def prove_host(endpoint_base: str, host: str, model: str, secret: str, timeout: float = 60) -> Proof:
    endpoint = f"{endpoint_base}/v1"
    try:
        status, _ = _request(f"{endpoint_base}/readyz", secret, None, 10)
        if status != 200:
            return Proof(host, endpoint, False, f"gateway /readyz answered {status}")
        start = time.monotonic()
        body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
        status, answer = _request(f"{endpoint}/chat/completions", secret, body, timeout)
        latency = (time.monotonic() - start) * 1000
    except OSError as exc:
        return Proof(host, endpoint, False, f"gateway unreachable: {exc}")
    if status != 200 or not answer.get("choices"):
        message = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
        return Proof(host, endpoint, False, f"chat completion through the gateway: {status} {message}")
    return Proof(host, endpoint, True, f"chat via gateway in {latency:.0f} ms", latency)


def prove(inv: Inventory, secret: str) -> list[Proof]:
    def one(host) -> Proof:  # type: ignore[no-untyped-def]
        base = f"http://{host.address}:{inv.ports.gateway}"
        if ":" in host.address:
            base = f"http://[{host.address}]:{inv.ports.gateway}"
        return prove_host(base, host.name, inv.model.served_name, secret)

    serving = [h for h in inv.hosts if "serving" in h.groups]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(serving)))) as pool:
        return list(pool.map(one, serving))
