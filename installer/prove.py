"""The last word of `installer up`: from this machine, each host's gateway answers a real request
for every model the host serves, with the installer's own API key — the path a client takes,
end to end, over HTTPS verified against the deployment's CA (unless the inventory turned TLS
off). The request is the model's task's: a chat completion (generate), embeddings (embed), a
rerank (score)."""

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from installer import remote
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
             ctx: ssl.SSLContext | None, headers: Mapping[str, str] | None = None,
             ) -> tuple[int, dict, dict[str, str]]:
    """Status, JSON body and response headers (names in lower case)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={
        "Authorization": f"Bearer {secret}", "Content-Type": "application/json", **(headers or {}),
    })
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return resp.status, json.load(resp), {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        got = {k.lower(): v for k, v in exc.headers.items()}
        try:
            return exc.code, json.load(exc), got
        except ValueError:
            return exc.code, {}, got


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


@dataclass(frozen=True)
class _Ask:
    """A task's proof request: what is sent, and what a real answer to it holds."""

    path: str
    body: Callable[[str], dict[str, Any]]
    answered: Callable[[Any], bool]
    done: str  # "<done> via gateway in N ms"
    failed: str  # "<failed> through the gateway: STATUS message"


def _numbers(values: Any) -> bool:
    return isinstance(values, list) and bool(values) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    )


def _embedded(answer: dict[str, Any]) -> bool:
    data = answer.get("data")
    return isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict) and _numbers(
        data[0].get("embedding")
    )


RERANK_DOCUMENTS = ["Hello there.", "The weather is cold."]


def _ranked(answer: dict[str, Any]) -> bool:
    results = answer.get("results")
    return isinstance(results, list) and len(results) == len(RERANK_DOCUMENTS) and _numbers(
        [r.get("relevance_score") if isinstance(r, dict) else None for r in results]
    )


ASKS: dict[str, _Ask] = {
    "generate": _Ask(
        "/chat/completions",
        lambda m: {"model": m, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
        lambda a: bool(a.get("choices")),
        "chat", "chat completion",
    ),
    "embed": _Ask(
        "/embeddings",
        lambda m: {"model": m, "input": "Say hello."},
        _embedded,
        "embeddings", "embeddings",
    ),
    "score": _Ask(
        "/rerank",
        lambda m: {"model": m, "query": "Say hello.", "documents": RERANK_DOCUMENTS},
        _ranked,
        "rerank", "rerank",
    ),
}


def prove_host(endpoint_base: str, host: str, model: str, secret: str, timeout: float = 60,
               ca_file: Path | None = None, headers: Mapping[str, str] | None = None,
               task: str = "generate", expect_headers: Mapping[str, str] | None = None) -> Proof:
    """One request of the model's `task` through the host's gateway (ASKS). `headers`: sent
    with it; `expect_headers`: the answer must carry them (a gray release's gate sends its stage
    header and checks which stage answered)."""
    endpoint = f"{endpoint_base}/v1"
    ask = ASKS[task]
    ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    try:
        status, _, _ = _request(f"{endpoint_base}/readyz", secret, None, 10, ctx)
        if status != 200:
            return Proof(host, endpoint, False, f"gateway /readyz answered {status}")
        start = time.monotonic()
        status, answer, got = _request(f"{endpoint}{ask.path}", secret, ask.body(model), timeout, ctx, headers)
        latency = (time.monotonic() - start) * 1000
    except OSError as exc:
        problem = tls_problem(exc, endpoint_base, ca_file)
        return Proof(host, endpoint, False, problem or f"gateway unreachable: {exc}")
    if status != 200 or not isinstance(answer, dict) or not ask.answered(answer):
        message = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
        return Proof(host, endpoint, False, f"{ask.failed} through the gateway: {status} {message}".rstrip())
    wrong = [f"{k}: {got.get(k.lower())!r} (wanted {v!r})" for k, v in (expect_headers or {}).items()
             if got.get(k.lower()) != v]
    if wrong:
        return Proof(host, endpoint, False, f"{ask.done} answered with {', '.join(wrong)}")
    return Proof(host, endpoint, True, f"{ask.done} via gateway in {latency:.0f} ms", latency)


def readyz(base: str, ctx: ssl.SSLContext | None, deployment: str, timeout: float = 5) -> dict[str, Any]:
    """A gateway's /readyz with its details (engines, outstanding requests, key file digests),
    which it shows only to the scrape token's holder; a 503 still carries the body."""
    from installer.paths import resolve_state_dir
    from installer.secret_files import metrics_token_file

    # Looked up, not made: `installer status` reads and must leave no empty state folder behind.
    path = metrics_token_file(deployment, resolve_state_dir()[0])
    token = path.read_text().strip() if path.is_file() else ""
    req = urllib.request.Request(f"{base}/readyz", headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as exc:
        try:
            return dict(json.load(exc))
        except ValueError:  # not the gateway's JSON (a proxy's page)
            return {"status": f"HTTP {exc.code}", "engines": {}}


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
    """One proof per serving host: every model the host serves answered through its gateway
    (the first failure stops the host's round). With several models, each part of the
    detail names its model."""
    ca = ca_file(inv)
    models = inv.served_models()

    def one(host) -> Proof:  # type: ignore[no-untyped-def]
        base = gateway_base(inv, host.address)
        mine = [m for m in models if host.name in m.hosts] or [models[0]]
        proofs: list[Proof] = []
        for m in mine:
            proof = prove_host(base, host.name, m.served_name, secret, ca_file=ca, task=m.task)
            if len(mine) > 1:
                proof = replace(proof, detail=f"{m.served_name}: {proof.detail}")
            proofs.append(proof)
            if not proof.ok:
                return proof
        return Proof(host.name, proofs[0].endpoint, True, "; ".join(p.detail for p in proofs), proofs[0].latency_ms)

    return remote.each([h for h in inv.hosts if "serving" in h.groups], one)
