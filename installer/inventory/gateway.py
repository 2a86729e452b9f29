"""The gateways' limits (`gateway:`), the deployment's ports (`ports:`) and its Redis
(`redis:`)."""

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from installer.inventory.fields import Port, Strict
from installer.inventory.redis_replicas import RedisReplicas


def _workers(value: Any) -> int | str:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64):
        return value  # type: ignore[no-any-return]
    raise ValueError(f"{value!r} is not 'auto' or a number of processes from 1 to 64")


class Gateway(Strict):
    """The gateways' limits (service/config.py); per-key limits are set with `installer keys`."""

    max_in_flight: Annotated[int, Field(ge=1, le=100_000)] = 256  # 503 + Retry-After above it
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 8 * 1024 * 1024  # 413 above it
    # Per client address and gateway worker process (service/connections.py); 429 and closed above it.
    max_connections_per_client: Annotated[int, Field(ge=1, le=100_000)] = 512
    upstream_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 600
    # On stop or restart, streams in flight get this long to finish.
    drain_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30
    # Gateway processes per host on the one port (service/prefork.py). "auto": one per 8 CPUs,
    # 1 to 8 — one event loop relays a few thousand tokens/s; the rest of the CPUs are the
    # engines' (their schedulers, tokenizers and API servers).
    workers: Annotated[int | str, BeforeValidator(_workers)] = "auto"
    # The API's documents (/docs, /redoc, /openapi.json) on the API port: off unless asked for.
    docs: bool = False


class Ports(Strict):
    engine: Port = 8000
    gateway: Port = 8080
    # The deployment's Redis (per-key limits, usage, quotas), on the first serving host; with one
    # serving host it listens on 127.0.0.1.
    redis: Port = 6379
    redis_sentinel: Port = 26379  # with redis.replicas (installer/inventory/redis_ha.py checks it)

    @model_validator(mode="after")
    def _distinct(self) -> "Ports":
        if self.engine == self.gateway:
            raise ValueError(f"engine and gateway must use different ports (both are {self.engine})")
        if self.redis in (self.engine, self.gateway):
            raise ValueError(f"redis port {self.redis} is also the engine or gateway port; pick another")
        return self


class RedisSettings(Strict):
    """The deployment's Redis, which keeps per-key limits, token quotas and usage for every gateway."""

    # When a gateway cannot reach it: admit requests without their limits and quotas (open, as
    # before this setting), or refuse the keys that have one with 503 (closed). Either way it is
    # counted and alerted (service/redis_outage.py, PLIGatewayRedisUnavailable).
    on_unavailable: Literal["open", "closed"] = "open"
    replicas: RedisReplicas = "auto"  # with Sentinel: installer/inventory/redis_ha.py, docs/ha.md
