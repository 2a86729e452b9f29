"""The gateway's shared state, one object per app, reachable as `request.app.state.gateway`."""

import ssl
from dataclasses import dataclass

from service.audit_retain import Retention
from service.auth import KeyRing
from service.config import Settings
from service.health import HealthChecker
from service.limits import Admission, Limiter
from service.metrics import Metrics
from service.proxy import Upstream
from service.routing import Router
from service.usage import NullLedger, UsageLedger


@dataclass(eq=False)
class Gateway:
    """Everything a request handler needs."""

    settings: Settings
    keys: KeyRing
    router: Router
    limiter: Limiter
    metrics: Metrics
    admission: Admission
    started_at: int
    usage: UsageLedger = NullLedger()  # noqa: RUF009  (stateless, so one instance may be shared)
    upstream: Upstream = None  # type: ignore[assignment]  # set in the lifespan (needs a loop)
    health: HealthChecker = None  # type: ignore[assignment]
    server_ssl: ssl.SSLContext | None = None  # what the API port serves (None: plain HTTP)
    client_ssl: ssl.SSLContext | None = None  # for https:// engines
    retention: Retention | None = None  # audit.retain: the prompts and answers the trail keeps
