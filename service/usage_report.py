"""`python -m service.usage_report --since YYYY-MM-DD`: the recorded usage and each quota key's
use in its current period, as JSON on stdout, read from the deployment's Redis.

The control machine runs it over SSH on a gateway host (`installer usage`, `installer keys
list`), as root, with the gateway's own configuration ($PLI_GATEWAY_CONFIG): Redis is reached
exactly as the gateway reaches it, and only read (HGETALL, GET). No secret is printed: the
output holds key names, model names and counts.
"""

import argparse
import json
import sys
from datetime import UTC, date, datetime, timedelta
from typing import Any

from service.auth import KeyRing
from service.config import ConfigError, load_settings
from service.usage import USAGE_PREFIX, period_bounds, quota_key


def report(since: date) -> dict[str, Any]:
    settings = load_settings()
    url = settings.limits.redis_url
    if url is None:
        return {"redis": False, "days": {}, "quotas": []}
    from service.redis_connect import sync_client
    from service.redis_limits import endpoint

    # the primary, through the sentinels when the gateway has them (a replica may lag)
    client = sync_client(endpoint(settings.limits, settings.tls), 5, decode_responses=True)
    now = datetime.now(UTC)
    days: dict[str, dict[str, int]] = {}
    day = since
    while day <= now.date():
        raw = client.hgetall(USAGE_PREFIX + day.isoformat())
        if raw:
            days[day.isoformat()] = {str(k): int(v) for k, v in raw.items()}
        day += timedelta(days=1)
    quotas = []
    keyring = KeyRing(settings.keys_file)
    for key in keyring.loaded():
        if not key.quota_tokens or not key.quota_period:
            continue
        period, resets = period_bounds(key.quota_period, now)
        used = client.get(quota_key(key.name, period))
        quotas.append({
            "key": key.name, "quota_tokens": key.quota_tokens, "period": key.quota_period,
            "used": int(used or 0), "resets": resets.strftime("%Y-%m-%dT%H:%M:%SZ"),
        })
    for tenant in settings.tenants.tenants if settings.tenants else ():
        if tenant.quota_tokens and tenant.quota_period:
            period, resets = period_bounds(tenant.quota_period, now)
            used = client.get(quota_key(f"tenant/{tenant.name}", period))
            quotas.append({
                "tenant": tenant.name, "quota_tokens": tenant.quota_tokens, "period": tenant.quota_period,
                "used": int(used or 0), "resets": resets.strftime("%Y-%m-%dT%H:%M:%SZ"),
            })
    client.close()
    return {"redis": True, "days": days, "quotas": quotas}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.usage_report")
    parser.add_argument("--since", type=date.fromisoformat, required=True, help="first UTC day, YYYY-MM-DD")
    args = parser.parse_args(argv)
    try:
        result = report(args.since)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except Exception as exc:  # any Redis or file error: one line for the control machine
        print(f"cannot read the usage: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
