"""The `redis.replicas` setting's type, apart from installer/inventory/redis_ha.py (which places
the replicas and sentinels and checks the setting against the hosts), so that models.py can
name it without importing what imports models.py."""

from typing import Annotated, Literal

from pydantic import Field

# auto: one replica once there are two serving hosts and a third host for a sentinel; N: that many.
RedisReplicas = Literal["auto"] | Annotated[int, Field(ge=0, le=8)]
