"""Engine readiness checks and the gateway's own probes (/livez, /readyz, /startupz).

An engine's /health answers 200 even when generation then fails, so the check that admits an
engine is a real one-token request. Successful client traffic counts as a passed check, so a
busy engine is not probed at all.

An idle engine that is in rotation gets the real request only every `deep_interval_s`, and
vLLM's /health at every interval between: each generation wakes the engine's workers, which
then spin on their queue for a second (vLLM's shared-memory broadcast), so a token every 5 s
from each gateway kept an idle CPU engine at 30-40% of a core (docs/benchmarks.md). /health still
catches an engine that died, froze or errored within an interval; one that answers /health but
cannot generate (a wedged worker: /health does not reach the workers) is caught by the next real
request: a client's that fails makes the next check a real one (Engine.suspect), and an idle
engine gets one within deep_interval_s.
"""

import asyncio
import functools
import logging
import time
from typing import Any

import aiohttp
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from service.metrics import Metrics
from service.routing import Engine, Router

log = logging.getLogger("service.health")
HEALTH_TIMEOUT_S = 5.0


def _probe_request(engine: Engine) -> tuple[str, dict[str, Any]]:
    if engine.task == "embed":
        return "/v1/embeddings", {"model": engine.model, "input": "ping"}
    if engine.task == "score":
        return "/v1/rerank", {"model": engine.model, "query": "ping", "documents": ["ping"]}
    return "/v1/completions", {"model": engine.model, "prompt": "ping", "max_tokens": 1}


class HealthChecker:
    def __init__(
        self, router: Router, session: aiohttp.ClientSession, interval_s: float, metrics: Metrics,
        deep_interval_s: float, stall_s: float = 60.0,
    ) -> None:
        self.router = router
        self.session = session
        self.interval_s = interval_s
        # never more often than interval_s: every check is then a real request, as before
        self.deep_interval_s = max(interval_s, deep_interval_s)
        self.metrics = metrics
        self.stall_s = stall_s
        self.started = asyncio.Event()  # set after the first round of checks
        # each engine's check in flight: a round starts none for an engine that has one
        self._checks: dict[str, asyncio.Task[None]] = {}

    def _deep(self, engine: Engine, now: float) -> bool:
        """A real request: to admit an engine, or when its last one is deep_interval_s old."""
        return not engine.healthy or now - engine.last_proven >= self.deep_interval_s

    async def check(self, engine: Engine, deep: bool = True) -> None:
        try:
            if deep:
                path, payload = _probe_request(engine)
                timeout = aiohttp.ClientTimeout(total=max(self.interval_s, 10.0))
                request = self.session.post(engine.url + path, json=payload, timeout=timeout)
            else:
                # the API server's own answer, no engine work: a round (gather) of checks is not
                # held up long by one hung engine
                timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
                request = self.session.get(engine.url + "/health", timeout=timeout)
            async with request as resp:
                await resp.read()
                ok = resp.status == 200
                reason = f"HTTP {resp.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            ok, reason = False, type(exc).__name__
        if ok and deep:
            engine.mark_ok()
        elif ok:
            engine.mark_alive()
        else:
            if engine.healthy:
                log.warning("engine %s failed its readiness check: %s", engine.name, reason)
            engine.mark_failed()
            self.metrics.upstream_errors.labels(engine.name, "readiness").inc()

    def take_out_stalled(self, now: float) -> None:
        """A wedged engine answers /health, so only its requests tell: out of rotation until a
        real request passes (its next check is one), and its waiting requests go elsewhere."""
        for engine in self.router.engines:
            if not engine.stalled(now, self.stall_s):
                continue
            if engine.healthy:  # (one its checks took out already still holds waiting requests)
                log.warning("engine %s taken out of rotation: %d request(s) had no first byte in %g s",
                            engine.name, len(engine.waiting), self.stall_s)
                engine.mark_failed()
                engine.suspect()
                self.metrics.upstream_errors.labels(engine.name, "stalled").inc()
            engine.give_up_waiting()

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self._round()
                except Exception:  # a round's bug must not end every later check of this worker
                    log.exception("a round of engine checks failed")
                self.started.set()
                await asyncio.sleep(self.interval_s)
        finally:  # cancelled at shutdown: the checks still running go too, before the session closes
            checks = list(self._checks.values())
            for task in checks:
                task.cancel()
            await asyncio.gather(*checks, return_exceptions=True)

    def _done(self, name: str, task: "asyncio.Task[None]") -> None:
        self._checks.pop(name, None)
        if not task.cancelled() and task.exception() is not None:  # a check's bug, logged as run() did
            log.error("the check of engine %s failed", name, exc_info=task.exception())

    async def _round(self) -> None:
        """Start the due engines' checks and wait for them at most an interval. A hung engine's
        check (a Ray driver stuck on a lost worker: /health unanswered until its 5 s timeout, a
        real request 10 s) then goes on alone, and the others are checked on time: waiting for
        it held every engine's next check, and idle healthy engines fell out of the ready window
        (3 intervals) with it (tests/integration/test_gateway_dead_group.py)."""
        now = time.monotonic()
        self.take_out_stalled(now)
        due = [e for e in self.router.engines
               if (not e.healthy or now - e.last_ok >= self.interval_s) and e.name not in self._checks]
        for e in due:
            task = asyncio.create_task(self.check(e, self._deep(e, now)))
            self._checks[e.name] = task
            task.add_done_callback(functools.partial(self._done, e.name))
        if self._checks:
            await asyncio.wait(list(self._checks.values()), timeout=self.interval_s)
        for e in self.router.engines:
            self.metrics.engine_healthy.labels(e.name, e.model).set(int(self.router.ready(e)))


probes = APIRouter(tags=["probes"])


@probes.get("/livez", summary="the process is up")
async def livez() -> dict[str, str]:
    return {"status": "ok"}


@probes.get("/readyz", summary="an engine passed a readiness check recently, and not draining")
async def readyz(request: Request) -> JSONResponse:
    """Public: the status only. The details (engine names, each one's outstanding requests,
    the digests of the key files loaded) are for the control machine: they need the scrape
    token, or, on a gateway with none, a loopback client."""
    gw = request.app.state.gateway
    engines = {e.name: gw.router.ready(e) for e in gw.router.engines}
    ready = not gw.admission.draining and any(engines.values())
    status = "ready" if ready else ("draining" if gw.admission.draining else "no ready engine")
    body: dict[str, Any] = {"status": status}
    if _may_see_details(request):
        # Requests each engine has from this gateway now: a rolling upgrade waits for 0 on the
        # engines it drained before it restarts them.
        outstanding = {e.name: gw.router.outstanding(e) for e in gw.router.engines}
        # The key files this process loaded: `installer keys` compares them with what it
        # pushed, so a gateway that kept old keys (a revoked key still valid) is named.
        body.update(engines=engines, outstanding=outstanding, **gw.keys.digests)
    return JSONResponse(body, status_code=200 if ready else 503)


def _may_see_details(request: Request) -> bool:
    token = request.app.state.scrape_token
    if token is not None:
        return bool(token.allows(request.headers.get("authorization")))
    client = request.client.host if request.client else ""
    return client in ("127.0.0.1", "::1")


@probes.get("/startupz", summary="start-up finished: keys loaded, first engine checks done")
async def startupz(request: Request) -> JSONResponse:
    started = request.app.state.gateway.health.started.is_set()
    return JSONResponse(
        {"status": "started" if started else "starting"}, status_code=200 if started else 503
    )
