"""The redis role's and the gateways' variables for a replicated Redis behind Sentinel
(installer/inventory/redis_ha.py decides where each part runs; docs/ha.md#redis-that-survives-a-host-redisreplicas).

Without replicas none is rendered and the roles' defaults do what they did before: one Redis on
the first serving host, no Sentinel, gateways on its URL alone."""

from typing import Any

from installer.inventory import redis_ha
from installer.planning.plan import DeploymentPlan

# Sentinel's timings. down-after: how long the primary must not answer before a sentinel calls
# it down; short enough that a lost host costs seconds of limits, long enough that a busy host's
# slow reply or a 1 s network blip does not fail over (tests/integration/test_redis_failover.py
# measures the outage these give). failover-timeout: how long a stuck failover is retried after.
DOWN_AFTER_MS = 2000
FAILOVER_TIMEOUT_MS = 10000


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def group_vars(plan: DeploymentPlan) -> dict[str, Any]:
    inv = plan.inventory
    found = redis_ha.layout(inv)
    if plan.redis is None or found is None or not found.sentinels:
        return {}  # the roles' defaults (no replica, no sentinel): other deployments keep their variables digest
    port = inv.ports.redis_sentinel
    return {
        "redis_replica_hosts": [h.name for h in found.replicas],
        "redis_sentinel_hosts": [h.name for h in found.sentinels],
        # Each Redis and sentinel listens on its own host's address.
        "redis_addresses": {h.name: h.address for h in (found.primary, *found.replicas, *found.sentinels)},
        # The first primary only: once Sentinel has moved it, the role asks the sentinels.
        "redis_primary_address": found.primary.address,
        "redis_sentinel_port": port,
        "redis_sentinel_quorum": redis_ha.QUORUM,
        "redis_master_name": redis_ha.MASTER_NAME,
        "redis_sentinel_down_after_ms": DOWN_AFTER_MS,
        "redis_sentinel_failover_timeout_ms": FAILOVER_TIMEOUT_MS,
        "gateway_redis_sentinels": [f"{_bracketed(h.address)}:{port}" for h in found.sentinels],
    }
