"""A load generator for any OpenAI-compatible endpoint, in the manner of `vllm bench serve`.

Streams every request and times it at the client: TTFT (request sent to first token), ITL
(gaps between tokens), TPOT ((end - first token) / (output tokens - 1)) and end-to-end
latency. Prompts are random words (about one token each for BPE tokenizers); the token counts
reported are the server's own `usage`, so the report says what was really sent.
"""

import asyncio
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import numpy as np
from pydantic import BaseModel

from installer.base.errors import InstallerError

# Common short English words: nearly all are a single token with a leading space.
_WORDS = (  # noqa: SIM905  (a list literal of 150 words would be 150 lines)
    "the of and to in is it you that he was for on are with as his they be at one have this "
    "from or had by word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like "
    "so these her long make thing see him two has look more day could go come did number "
    "sound no most people my over know water than call first who may down side been now find"
).split()


class BenchError(InstallerError):
    """The benchmark could not run (bad options, or the endpoint refused every request)."""


@dataclass(frozen=True)
class BenchConfig:
    base_url: str
    model: str
    api_key: str | None = None
    endpoint: Literal["chat", "completions"] = "chat"
    input_len: int = 1024
    output_len: int = 512
    range_ratio: float = 0.0  # lengths drawn uniformly from len*(1-r) .. len*(1+r)
    num_requests: int = 100
    concurrency: int = 8
    request_rate: float = (
        math.inf
    )  # requests/s, Poisson arrivals; inf: as fast as concurrency allows
    ignore_eos: bool = True  # vLLM extension: always generate output_len tokens
    timeout_s: float = 600.0
    seed: int = 0

    def check(self) -> None:
        problems = []
        if self.input_len < 1 or self.output_len < 1:
            problems.append("input and output lengths must be at least 1")
        if not 0 <= self.range_ratio < 1:
            problems.append("range ratio must be in [0, 1)")
        if self.num_requests < 1 or self.concurrency < 1:
            problems.append("number of requests and concurrency must be at least 1")
        if self.request_rate <= 0:
            problems.append("request rate must be positive")
        if not self.base_url.startswith(("http://", "https://")):
            problems.append(f"base URL {self.base_url!r} must start with http:// or https://")
        if problems:
            raise BenchError("invalid benchmark options", problems)


@dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0


class Stats(BaseModel):
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values_s: list[float]) -> "Stats | None":
        if not values_s:
            return None
        ms = np.asarray(values_s) * 1000
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        return cls(mean=float(ms.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


class BenchReport(BaseModel):
    base_url: str
    model: str
    endpoint: str
    concurrency: int
    request_rate: float | None
    completed: int
    failed: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    ttft_ms: Stats | None
    tpot_ms: Stats | None
    itl_ms: Stats | None
    e2e_ms: Stats | None
    errors: dict[str, int]


def make_requests(cfg: BenchConfig) -> list[tuple[str, int]]:
    """(prompt, max_tokens) pairs, reproducible from the seed; each prompt differs from the
    first word on, so an engine's prefix cache does not flatter the result."""
    rng = random.Random(cfg.seed)

    def length(n: int) -> int:
        return max(
            1,
            rng.randint(
                math.floor(n * (1 - cfg.range_ratio)), math.ceil(n * (1 + cfg.range_ratio))
            ),
        )

    return [
        (" ".join(rng.choices(_WORDS, k=length(cfg.input_len))), length(cfg.output_len))
        for _ in range(cfg.num_requests)
    ]


def _payload(cfg: BenchConfig, prompt: str, max_tokens: int) -> bytes:
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def _has_token(obj: dict[str, Any]) -> bool:
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or choice.get("text"):
            return True
    return False


async def send_one(
    session: aiohttp.ClientSession, url: str, payload: bytes, headers: dict[str, str]
) -> RequestResult:
    """One streamed request, timed at the client."""
    res = RequestResult()
    start = time.perf_counter()
    last = 0.0
    tokens_seen = 0
    try:
        async with session.post(url, data=payload, headers=headers) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300]
                res.error = f"HTTP {resp.status}: {text}"
                return res
            pending = b""
            async for chunk in resp.content.iter_any():
                pending += chunk
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data: ") or event == b"data: [DONE]":
                        continue
                    obj = json.loads(event[6:])
                    if "error" in obj:
                        res.error = f"stream error: {obj['error'].get('message', obj['error'])}"[
                            :300
                        ]
                        return res
                    now = time.perf_counter()
                    if _has_token(obj):
                        tokens_seen += 1
                        if last:
                            res.itl.append(now - last)
                        else:
                            res.ttft = now - start
                        last = now
                    if obj.get("usage"):
                        res.prompt_tokens = obj["usage"].get("prompt_tokens", 0)
                        res.output_tokens = obj["usage"].get("completion_tokens", 0)
        res.e2e = time.perf_counter() - start
        res.output_tokens = res.output_tokens or tokens_seen
        res.ok = tokens_seen > 0
        if not res.ok:
            res.error = "the stream ended without a token"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:300]
    return res


def endpoint_url(base_url: str, endpoint: str) -> str:
    """The request URL for a base URL given either way the openai client users write it: with
    or without the trailing `/v1` (https://h:8080 and https://h:8080/v1 mean the same)."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + ("/chat/completions" if endpoint == "chat" else "/completions")


async def run_load(
    cfg: BenchConfig,
    session: aiohttp.ClientSession,
    on_done: Callable[[RequestResult], None] | None = None,
) -> tuple[list[RequestResult], float]:
    """Send cfg.num_requests requests; returns the results and the wall time they took."""
    url = endpoint_url(cfg.base_url, cfg.endpoint)
    headers = {"Content-Type": "application/json"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    payloads = [_payload(cfg, p, n) for p, n in make_requests(cfg)]
    gate = asyncio.Semaphore(cfg.concurrency)
    rng = random.Random(cfg.seed + 1)
    results: list[RequestResult] = []

    async def one(payload: bytes) -> None:
        async with gate:
            res = await send_one(session, url, payload, headers)
        results.append(res)
        if on_done:
            on_done(res)

    start = time.perf_counter()
    tasks = []
    for payload in payloads:
        tasks.append(asyncio.create_task(one(payload)))
        if math.isfinite(cfg.request_rate):
            await asyncio.sleep(rng.expovariate(cfg.request_rate))
    await asyncio.gather(*tasks)
    return results, time.perf_counter() - start


def summarize(cfg: BenchConfig, results: list[RequestResult], duration_s: float) -> BenchReport:
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return BenchReport(
        base_url=cfg.base_url,
        model=cfg.model,
        endpoint=cfg.endpoint,
        concurrency=cfg.concurrency,
        request_rate=cfg.request_rate if math.isfinite(cfg.request_rate) else None,
        completed=len(ok),
        failed=len(results) - len(ok),
        duration_s=duration_s,
        requests_per_s=len(ok) / duration_s,
        output_tokens_per_s=out_tokens / duration_s,
        total_tokens_per_s=(in_tokens + out_tokens) / duration_s,
        mean_prompt_tokens=in_tokens / len(ok) if ok else 0.0,
        mean_output_tokens=out_tokens / len(ok) if ok else 0.0,
        ttft_ms=Stats.of([r.ttft for r in ok]),
        tpot_ms=Stats.of(tpot),
        itl_ms=Stats.of([x for r in ok for x in r.itl]),
        e2e_ms=Stats.of([r.e2e for r in ok]),
        errors=dict(Counter(r.error for r in results if r.error).most_common(5)),
    )


def client_session(cfg: BenchConfig) -> aiohttp.ClientSession:
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)


async def bench(
    cfg: BenchConfig, on_done: Callable[[RequestResult], None] | None = None
) -> BenchReport:
    cfg.check()
    async with client_session(cfg) as session:
        results, duration = await run_load(cfg, session, on_done)
    report = summarize(cfg, results, duration)
    if report.completed == 0:
        raise BenchError(
            f"every request to {cfg.base_url} failed",
            [f"{n}x {e}" for e, n in report.errors.items()],
        )
    return report
