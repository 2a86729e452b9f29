"""Clients for the deployment's Redis: one URL, or the primary that Sentinel names.

With sentinels (the inventory's `redis.replicas`,
docs/ha.md#redis-that-survives-a-host-redisreplicas), a connection asks them for
the current primary of the master set, and asks again when it is refused (a demoted primary
answers READONLY, a dead one does not answer): redis-py's Sentinel does the discovery, nothing
here does. The URL gives the password, the db and rediss://; the sentinels are reached with the
same password and, under rediss://, the same TLS (the deployment CA, this host's certificate).

Every caller gets its client here: the gateway's limiter and usage ledger (asyncio), the
release controller, `release` admin commands and the usage report (blocking).
"""

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass(frozen=True)
class TLSFiles:
    ca_file: str
    certfile: str
    keyfile: str


@dataclass(frozen=True)
class Endpoint:
    """Where the deployment's Redis is: `url`, or the primary `master` that `sentinels` name."""

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = "pli"
    tls: TLSFiles | None = None


def parse_sentinel(address: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _ssl(ep: Endpoint) -> dict[str, Any]:
    """rediss://: verified against the deployment CA, showing this host's certificate."""
    if ep.tls is None or not ep.url.startswith("rediss://"):
        return {}
    return {"ssl_ca_certs": ep.tls.ca_file, "ssl_certfile": ep.tls.certfile, "ssl_keyfile": ep.tls.keyfile}


def _sentinel_args(ep: Endpoint, timeout: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sentinels' connection arguments, the primary's), both from the URL."""
    parts = urlsplit(ep.url)
    password = unquote(parts.password) if parts.password else None
    db = int(parts.path.lstrip("/") or 0)
    common: dict[str, Any] = {"password": password, "socket_timeout": timeout, "socket_connect_timeout": timeout}
    if ep.url.startswith("rediss://"):
        common |= {"ssl": True, **_ssl(ep)}
    return dict(common), {**common, "db": db}


def async_client(ep: Endpoint, timeout: float, **extra: Any) -> Any:
    """A redis.asyncio client of the current primary."""
    if not ep.sentinels:
        import redis.asyncio as aioredis

        return aioredis.from_url(ep.url, socket_timeout=timeout, socket_connect_timeout=timeout, **_ssl(ep), **extra)
    from redis.asyncio.sentinel import Sentinel

    sentinel_kwargs, primary = _sentinel_args(ep, timeout)
    return Sentinel(list(ep.sentinels), sentinel_kwargs=sentinel_kwargs).master_for(ep.master, **primary, **extra)


def sync_client(ep: Endpoint, timeout: float, **extra: Any) -> Any:
    """A blocking redis client of the current primary."""
    if not ep.sentinels:
        import redis

        return redis.Redis.from_url(ep.url, socket_timeout=timeout, socket_connect_timeout=timeout, **_ssl(ep), **extra)
    from redis.sentinel import Sentinel

    sentinel_kwargs, primary = _sentinel_args(ep, timeout)
    return Sentinel(list(ep.sentinels), sentinel_kwargs=sentinel_kwargs).master_for(ep.master, **primary, **extra)
