"""`GET /metrics/engines/{name}`: the gateway relays a configured engine's Prometheus metrics.

Engines listen on loopback only (their API has no authentication), so Prometheus on the
monitoring host cannot scrape them directly. The gateway already sits next to them and serves
its own /metrics on the API port; relaying each engine's /metrics there gives Prometheus
every engine without opening the engine port to the network. Like /metrics, it answers only
Prometheus's scrape token (service/scrape_auth.py; app.py adds that check). Only engines named
in the gateway's configuration can be fetched (no open proxy), only their /metrics path,
read-only. An engine that does not answer turns into a 503, so Prometheus records `up == 0`.
"""

import aiohttp
from fastapi import APIRouter, Request
from starlette.responses import PlainTextResponse, Response

engine_metrics = APIRouter(tags=["metrics"])
_TIMEOUT = aiohttp.ClientTimeout(total=10)


@engine_metrics.get("/metrics/engines/{name}", include_in_schema=False)
async def relay(name: str, request: Request) -> Response:
    gw = request.app.state.gateway
    engine = next((e for e in gw.router.engines if e.name == name), None)
    if engine is None:
        return PlainTextResponse(f"no engine named {name!r} behind this gateway\n", status_code=404)
    try:
        async with gw.upstream.session.get(engine.url + "/metrics", timeout=_TIMEOUT) as resp:
            body = await resp.read()
            content_type = resp.headers.get("Content-Type", "text/plain; version=0.0.4")
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return PlainTextResponse(f"engine {name} unreachable: {type(exc).__name__}\n", status_code=503)
    if status != 200:
        return PlainTextResponse(f"engine {name} answered HTTP {status}\n", status_code=503)
    return Response(body, media_type=content_type)
