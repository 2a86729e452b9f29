"""The last word of `installer up`: from this machine, each host's gateway answers a real chat
completion with the installer's own API key — the path a client takes, end to end, over HTTPS
verified against the deployment's CA (unless the inventory turned TLS off)."""

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from installer.inventory import Inventory
from installer.tls import store as tls_store


@dataclass(frozen=True)
class Proof:
    host: str
    endpoint: str
    ok: bool
    detail: str
    latency_ms: float | None = None


def _request(url: str, secret: str, body: dict | None, timeout: float,
             ctx: ssl.SSLContext | None, headers: Mapping[str, str] | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={
        "Authorization": f"Bearer {secret}", "Content-Type": "application/json", **(headers or {}),
    })
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.load(exc)
        except ValueError:
            return exc.code, {}


def tls_problem(exc: BaseException, base: str, ca_file: Path | None) -> str | None:
    """A certificate failure in words a user can act on, or None if exc is not one."""
    reason = getattr(exc, "reason", exc)
    if not isinstance(reason, ssl.SSLCertVerificationError):
        return None
    msg = reason.verify_message or str(reason)
    if "expired" in msg:
        return f"the TLS certificate of {base} has expired; run `installer up` to renew it"
    if "mismatch" in msg.lower() or reason.verify_code == 62:
        return (f"the TLS certificate of {base} does not match {base.split('//', 1)[-1]} ({msg}); "
                "it was issued for another host name or address")
    return f"the TLS certificate of {base} is not trusted ({msg}); it is not signed by the CA {ca_file}"


def prove_host(endpoint_base: str, host: str, model: str, secret: str, timeout: float = 60,
               ca_file: Path | None = None, headers: Mapping[str, str] | None = None) -> Proof:
    """`headers`: sent with the completion (a gray release's gate sends its stage header)."""
    endpoint = f"{endpoint_base}/v1"
    ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    try:
        status, _ = _request(f"{endpoint_base}/readyz", secret, None, 10, ctx)
        if status != 200:
            return Proof(host, endpoint, False, f"gateway /readyz answered {status}")
        start = time.monotonic()
        body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
        status, answer = _request(f"{endpoint}/chat/completions", secret, body, timeout, ctx, headers)
        latency = (time.monotonic() - start) * 1000
    except OSError as exc:
        problem = tls_problem(exc, endpoint_base, ca_file)
        return Proof(host, endpoint, False, problem or f"gateway unreachable: {exc}")
    if status != 200 or not answer.get("choices"):
        message = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
        return Proof(host, endpoint, False, f"chat completion through the gateway: {status} {message}")
    return Proof(host, endpoint, True, f"chat via gateway in {latency:.0f} ms", latency)


def gateway_base(inv: Inventory, address: str) -> str:
    """The URL clients use for a host's gateway, by the inventory's TLS setting."""
    scheme = "http" if inv.tls.mode == "off" else "https"
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{inv.ports.gateway}"


def ca_file(inv: Inventory) -> Path | None:
    """The CA that clients on this machine verify the gateways with; None when TLS is off."""
    if inv.tls.mode == "off":
        return None
    return tls_store.host_files(inv, inv.hosts[0].name).ca


def prove(inv: Inventory, secret: str) -> list[Proof]:
    ca = ca_file(inv)

    def one(host) -> Proof:  # type: ignore[no-untyped-def]
        return prove_host(gateway_base(inv, host.address), host.name, inv.model.served_name, secret,
                          ca_file=ca)

    serving = [h for h in inv.hosts if "serving" in h.groups]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(serving)))) as pool:
        return list(pool.map(one, serving))
