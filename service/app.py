"""`create_app(settings)`: the gateway's parts, wired, with their lifetimes in the lifespan."""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic.json_schema import models_json_schema
from starlette.responses import Response

from service import metrics_port, scrape_auth
from service.accesslog import AccessLog, AccessLogMiddleware
from service.audit_retain import Retention
from service.auth import KeyRing, jwt_verifier
from service.config import Settings
from service.drain import DrainFile
from service.engine_metrics import engine_metrics
from service.errors import install_error_handlers
from service.evidence import EvidenceCap
from service.health import HealthChecker, probes
from service.limits import Admission, AdmissionMiddleware, BodyPolicy, Limiter, LocalLimiter
from service.metrics import Metrics, scrape_registry
from service.openai_api import ROUTES, OpenAIRoutes, api, openapi_paths
from service.proxy import Upstream, delivery_trace
from service.request_audit import RequestAudit
from service.routing import Router
from service.scrape_auth import ScrapeToken
from service.shared import SharedLimiter, SharedState
from service.stages import StagesFile
from service.state import Gateway
from service.tenants import Tenants
from service.tls import client_context, server_context
from service.tls import watch as watch_certs
from service.tracing import start as start_tracing
from service.usage import NullLedger, UsageLedger

if TYPE_CHECKING:
    from service.release_weights import ControlledWeights

log = logging.getLogger("service.app")


def create_app(settings: Settings, shared: SharedState | None = None) -> FastAPI:
    """The gateway, or one worker of it: `shared` is what the workers share (service/shared.py),
    attached to this worker; worker 0 also serves the separate metrics port, if any."""
    metrics = Metrics()
    limits = settings.limits
    workers = shared.workers if shared else 1
    limiter = _limiter(settings, metrics, shared)
    tenants = Tenants.of(settings.tenants) if settings.tenants else None
    # a missing or bad file fails start-up, loudly
    keys = KeyRing(settings.keys_file, jwt_verifier(settings.jwt), tenants)
    gateway = Gateway(
        settings=settings,
        keys=keys,
        # Ready means checked within three intervals: one missed check is not an outage.
        router=Router(
            settings.engines, ready_window_s=3 * settings.health_interval_s,
            drain=DrainFile(settings.drain_file), shared=shared,
            stages=StagesFile(settings.stages_file),
        ),
        limiter=limiter,
        usage=_ledger(settings, limiter, keys, metrics),
        metrics=metrics,
        # The cap is the gateway's: each worker takes its share.
        admission=Admission(
            _share(limits.max_in_flight, workers),
            _share(limits.max_in_flight_per_key or max(1, limits.max_in_flight * 3 // 4), workers),
            # a worker's share still admits one largest body, whichever worker gets it
            max(_share(limits.max_body_bytes_in_flight, workers), limits.max_body_bytes),
            limits.max_body_bytes,
        ),
        started_at=int(time.time()),
    )
    gateway.router.weights = _release_weights(settings, limiter)
    if settings.tls is not None:  # unreadable or mismatched files fail start-up, loudly
        gateway.server_ssl = server_context(settings.tls, metrics.cert_expiry)
        gateway.client_ssl = client_context(settings.tls)
    access_log = AccessLog(settings.access_log)
    audit = settings.request_audit
    if audit is not None and audit.retain is not None:
        retain = audit.retain
        gateway.retention = Retention(
            retain.prompts, retain.answers,
            [r if isinstance(r, str) else (r.name, r.pattern) for r in retain.redact], retain.max_chars,
        )
    request_audit = (
        RequestAudit(audit.dir, audit.retention_days, audit.max_bytes_per_day, metrics.audit_unrecorded.inc)
        if audit
        else None
    )
    # Read once: a missing, unreadable or short token file fails start-up, loudly.
    scrape_token = ScrapeToken(settings.metrics_token_file) if settings.metrics_token_file else None

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Engines' uvicorn closes idle connections after 5 s; keeping ours for less avoids
        # sending a request on a connection the engine is closing.
        ev = settings.release_evidence
        connector = aiohttp.TCPConnector(
            limit=0, keepalive_timeout=4.0, ssl=gateway.client_ssl or True
        )
        session = aiohttp.ClientSession(
            connector=connector, skip_auto_headers=("User-Agent",), auto_decompress=False,
            trace_configs=[delivery_trace()],
        )
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=limits.connect_timeout_s, sock_read=limits.upstream_timeout_s
        )
        gateway.upstream = Upstream(
            session, gateway.router, gateway.limiter, metrics, timeout, gateway.usage,
            settings.stage_header.encode(), settings.canary_first_byte_timeout_s,
            settings.canary_answer_timeout_s, settings.first_byte_timeout_s, settings.answer_timeout_s,
            EvidenceCap(ev.window_s, ev.per_key_floor, ev.per_key_share),
            # Here, not at import: each worker's exporter thread starts after the fork.
            start_tracing(settings.tracing),
        )
        gateway.health = HealthChecker(gateway.router, session, settings.health_interval_s, metrics,
                                       settings.health_deep_interval_s, settings.engine_stall_s)
        tasks = [
            asyncio.create_task(gateway.health.run()),
            asyncio.create_task(gateway.keys.watch()),
        ]
        if gateway.keys.jwt is not None:
            tasks.append(asyncio.create_task(gateway.keys.jwt.source.watch()))
        if gateway.router.weights is not None:
            tasks.append(asyncio.create_task(gateway.router.weights.run()))
        if settings.tls is not None:
            tasks.append(asyncio.create_task(watch_certs(
                settings.tls, gateway.server_ssl, gateway.client_ssl, metrics.cert_expiry,
                settings.tls.reload_interval_s,
            )))
        # uvicorn accepts connections only after this start-up: waiting for the first round of
        # engine checks means a restarted gateway never answers "no healthy engine" to the
        # connections that queued on its (systemd-held) socket while it started.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gateway.health.started.wait(), timeout=15)
        metrics_server = None
        if settings.metrics_host and settings.metrics_port and (shared is None or shared.index == 0):
            metrics_server = metrics_port.start(
                settings.metrics_host, settings.metrics_port, scrape_registry(metrics.registry),
                scrape_token, settings.tls,
            )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await session.close()
            if gateway.upstream.tracer is not None:  # exports what is queued, in the export timeout
                await asyncio.to_thread(gateway.upstream.tracer.shutdown)
            await gateway.usage.close()
            await gateway.limiter.close()
            access_log.close()
            if request_audit is not None:
                request_audit.close()
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()

    # The documents are off unless asked for (`docs: true`): they map the whole surface.
    docs = settings.docs
    app = FastAPI(
        title="private-llm gateway", version="1", lifespan=lifespan,
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.state.gateway = gateway
    app.state.scrape_token = scrape_token  # /readyz's details need it (service/health.py)
    install_error_handlers(app)
    app.include_router(probes)
    app.include_router(api)
    if scrape_token is not None and settings.metrics_port is None:
        # Only for Prometheus: no route at all without a token configured (404, not 401).
        scraper = [Depends(scrape_auth.require(scrape_token))]
        app.add_api_route("/metrics", _metrics, include_in_schema=False, dependencies=scraper)
        # Prometheus reaches loopback engines through this
        app.include_router(engine_metrics, dependencies=scraper)
    # Last added is outermost: the access log sees what admission refuses, and admission
    # (in-flight cap, API key, then the body) runs before the API routes.
    app.add_middleware(OpenAIRoutes, gateway=gateway)
    app.add_middleware(
        AdmissionMiddleware,
        admission=gateway.admission,
        keys=gateway.keys,
        body=BodyPolicy(limits.max_body_bytes, limits.body_timeout_s, limits.min_body_bytes_per_s,
                        limits.body_rate_grace_s),
        metrics=metrics,
        limiter=limiter,
    )
    app.add_middleware(AccessLogMiddleware, log=access_log, metrics=metrics, audit=request_audit)
    return app


def _share(total: int, workers: int) -> int:
    """A worker's share of a gateway-wide cap (rounded up: never 0)."""
    return -(-total // workers)


def _limiter(settings: Settings, metrics: Metrics, shared: SharedState | None) -> Limiter:
    if settings.limits.redis_url is None:
        return LocalLimiter() if shared is None else SharedLimiter(shared)
    from service.redis_limits import RedisLimiter, endpoint  # only deployments that use Redis need it

    return RedisLimiter(endpoint(settings.limits, settings.tls), metrics, settings.limits.redis_on_unavailable)


def _release_weights(settings: Settings, limiter: Limiter) -> "ControlledWeights | None":
    """The release controller's weights, read on the limiter's Redis connections; none without Redis."""
    if settings.limits.redis_url is None:
        return None
    from service.redis_limits import RedisLimiter
    from service.release_weights import ControlledWeights  # only deployments that use Redis need it

    assert isinstance(limiter, RedisLimiter)
    return ControlledWeights(limiter.client)


def _ledger(settings: Settings, limiter: Limiter, keys: KeyRing, metrics: Metrics) -> UsageLedger:
    """Usage and quotas in the limiter's Redis, on its connections; none without Redis."""
    if settings.limits.redis_url is None:
        if keys.with_quota():
            log.warning(
                "quotas not enforced and usage not recorded without limits.redis_url: keys %s",
                ", ".join(keys.with_quota()),
            )
        return NullLedger()
    from service.redis_limits import RedisLimiter
    from service.redis_usage import RedisLedger  # only deployments that use Redis need it

    assert isinstance(limiter, RedisLimiter)
    return RedisLedger(limiter.client, limiter.outage, settings.limits.default_completion_reserve,
                       wait_replica=limiter.replicated)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the POST routes OpenAIRoutes serves, with their bodies."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        _, defs = models_json_schema(
            [(m, "validation") for m in ROUTES.values()],
            ref_template="#/components/schemas/{model}",
        )
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs["$defs"])
        schema["paths"].update(openapi_paths())
        app.openapi_schema = schema
    return app.openapi_schema


async def _metrics(request: Request) -> Response:
    registry = scrape_registry(request.app.state.gateway.metrics.registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
