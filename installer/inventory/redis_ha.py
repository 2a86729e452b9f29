"""`redis.replicas`: the deployment's Redis with replicas and Sentinel, so that limits, quotas and
usage survive the loss of a host (docs/ha.md#redis-that-survives-a-host-redisreplicas).

- `auto` (the default): one replica, on the second serving host, once the deployment has two
  serving hosts and a third host for the third sentinel; else 0, one Redis as before.
- `0`: one Redis, on the first serving host (no Sentinel).
- `N`: N replicas, on the serving hosts after the first.

Sentinels: three, so that two (a majority) still elect a leader and promote a replica after any
one host is lost. They go on the Redis hosts first, then the other serving hosts, then hosts of
the monitoring group that do not serve. Never on the control machine: it is a laptop or a CI
runner that is often off (a sentinel that is off is a lost vote, and with one host down too no
failover happens), it has no address the hosts can be sure to reach, and its state is meant to
move to another machine (#37). With two serving hosts and no other host there is no third vote:
`auto` stays at 0, and asking for a replica is refused with the fix (add a monitoring host).

Refused at the setting's file:line (`validate`, before any host is touched):
- replicas with a single serving host (a replica on the same host survives nothing);
- more replicas than serving hosts after the first;
- replicas where no three hosts can run sentinels (quorum impossible).
"""

from collections.abc import Iterator
from dataclasses import dataclass

from installer.inventory.hosts import Host
from installer.inventory.models import Inventory
from installer.inventory.source import Loc

# Odd, so that a majority exists; three survive the loss of one host, which is what is promised.
SENTINELS = 3
QUORUM = 2  # sentinels that must agree the primary is down (also the majority that elects)
MASTER_NAME = "pli"


@dataclass(frozen=True)
class RedisLayout:
    primary: Host
    replicas: tuple[Host, ...]
    sentinels: tuple[Host, ...]  # empty: no Sentinel (a single Redis)


def _serving(inv: Inventory) -> list[Host]:
    return [h for h in inv.hosts if "serving" in inv.host_groups(h)]


def _sentinel_candidates(inv: Inventory, n_replicas: int) -> list[Host]:
    serving = _serving(inv)
    watchers = [h for h in inv.hosts if "monitoring" in inv.host_groups(h) and h not in serving]
    return serving[: 1 + n_replicas] + serving[1 + n_replicas:] + watchers


def replica_count(inv: Inventory) -> int:
    """The replicas the deployment runs (`auto` resolved)."""
    asked = inv.redis.replicas
    if asked != "auto":
        return int(asked)
    if len(_serving(inv)) >= 2 and len(_sentinel_candidates(inv, 1)) >= SENTINELS:
        return 1
    return 0


def layout(inv: Inventory) -> RedisLayout | None:
    """Where Redis, its replicas and the sentinels run; None without serving hosts (a cloud
    inventory before provisioning). Assumes problems() found nothing."""
    serving = _serving(inv)
    if not serving:
        return None
    n = replica_count(inv)
    sentinels = tuple(_sentinel_candidates(inv, n)[:SENTINELS]) if n else ()
    return RedisLayout(serving[0], tuple(serving[1: 1 + n]), sentinels)


def runs_redis(inv: Inventory, host: Host) -> bool:
    """The host installs redis-server: the primary's, a replica's or a sentinel's (a sentinel is
    `redis-server --sentinel`)."""
    found = layout(inv)
    return found is not None and host in (found.primary, *found.replicas, *found.sentinels)


def problems(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    asked = inv.redis.replicas
    serving = _serving(inv)
    if asked == "auto" or asked == 0 or not serving:
        return
    at: Loc = ("redis", "replicas")
    if len(serving) == 1:
        yield at, (
            f"redis.replicas: {asked} asks for a replica and Sentinel, but this deployment has one serving "
            "host (a replica on the same host survives nothing); add a serving host, or set redis.replicas: 0"
        )
        return
    if asked > len(serving) - 1:
        yield at, (
            f"redis.replicas: {asked} needs {asked + 1} serving hosts (one Redis each), this deployment has "
            f"{len(serving)}; set redis.replicas: {len(serving) - 1} or auto"
        )
        return
    port = inv.ports.redis_sentinel
    if port in (inv.ports.engine, inv.ports.gateway, inv.ports.redis):
        yield ("ports", "redis_sentinel"), (
            f"ports.redis_sentinel {port} is also the engine, gateway or redis port; pick another (default 26379)"
        )
    candidates = _sentinel_candidates(inv, asked)
    if len(candidates) < SENTINELS:
        yield at, (
            f"redis.replicas: {asked} needs Sentinel on {SENTINELS} hosts for a quorum of {QUORUM} that survives "
            f"losing one, and this deployment has {len(candidates)} ({', '.join(h.name for h in candidates)}); "
            "add a host in the monitoring group (groups: [monitoring]) for the third sentinel, or set "
            "redis.replicas: 0 (the control machine gets none: it is often off, and it moves)"
        )
