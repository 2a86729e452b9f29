"""`installer usage` and the quota column of `installer keys list`: what the gateways recorded.

The gateways count every answered request into the deployment's Redis (service/usage.py), on
the first serving host. That Redis listens only for the gateways (with several serving hosts:
TLS with a deployment certificate and a password; with one: loopback and a password), and
stays so: the control machine reads it over SSH instead, by running one fixed, read-only
program on a serving host, as root, with that gateway's own configuration
(`python -m service.usage_report`, from the host's gateway environment). Its JSON output holds
key and model names and counts, never a secret.
"""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from installer.base.errors import InstallerError
from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory
from installer.inventory.topology import HOST_LAYOUT, redis_host, serving_hosts

DIMENSIONS = ("key", "model", "day", "tenant")
# A caller in a tenant is recorded as "<caller>~<tenant>" (service/usage.py, usage_caller).
_TENANT_MARK = "~"
# x: requests whose stream was cut before the engine's usage (the client left, the engine broke
# off); their tokens are the gateway's prompt estimate and one per event relayed.
_COUNTS = {"r": "requests", "p": "prompt_tokens", "c": "completion_tokens", "x": "cut_requests"}
# -I (isolated): neither the working directory (the SSH user's home, where a planted
# service/usage_report.py would otherwise run as root) nor PYTHON* variables reach sys.path;
# the module comes from the release's venv, where the gateway's wheel is installed.
def report_command(python: str, since: str) -> str:
    return (
        f"cd / && PLI_GATEWAY_CONFIG={HOST_LAYOUT['pli_config_dir']}/gateway.yml "
        f"{python} -I -m service.usage_report --since {since}"
    )


_PYTHON = f"{HOST_LAYOUT['pli_root']}/current/gateway-venv/bin/python"


class UsageError(InstallerError):
    """The usage could not be read, or a usage option is malformed."""


@dataclass(frozen=True)
class Report:
    host: str  # the serving host that read it
    days: dict[str, dict[str, int]]  # UTC day -> "<r|p|c>:<key>:<model>" -> count
    quotas: list[dict[str, Any]]  # key, quota_tokens, period, used, resets


def parse_since(text: str, today: date | None = None) -> date:
    """`7d` (the UTC day seven days ago), `today`, or a YYYY-MM-DD date."""
    today = today or datetime.now(UTC).date()
    if text == "today":
        return today
    if m := re.fullmatch(r"(\d{1,4})d", text):
        return today - timedelta(days=int(m.group(1)))
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r}: give a number of days (7d), today, or a date (YYYY-MM-DD)") from None


def parse_by(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    wrong = [p for p in parts if p not in DIMENSIONS]
    if wrong or not parts or len(set(parts)) != len(parts):
        raise UsageError(f"--by {text!r}: a comma-separated list of {', '.join(DIMENSIONS)}, each once")
    return parts


def _run(inv: Inventory, host: Any, command: str) -> tuple[int, str, str]:
    r = remote.run_one(target(inv, host), command)
    return r.rc, r.text, r.stderr


def require_redis(inv: Inventory, what: str = "usage accounting and quotas") -> Host:
    """The Redis host that usage and quotas live in: the first serving host (refused only for an
    inventory that names no serving host yet, such as a cloud one before `installer up`)."""
    first = redis_host(inv)
    if first is None:
        raise UsageError(
            f"{what} live in the Redis of the deployment's first serving host; {inv.deployment} has none yet",
            ["run `installer up` first (a cloud inventory's hosts are named once they are provisioned)"],
        )
    return first


def fetch(inv: Inventory, since: date) -> Report:
    """Read the usage from `since` (UTC) on, through the first serving host that answers (the
    Redis host first: it needs no network to reach it)."""
    first = require_redis(inv)
    hosts = [first, *(h for h in serving_hosts(inv) if h is not first)]
    failures = []
    for host in hosts:
        rc, out, err = _run(inv, host, report_command(_PYTHON, since.isoformat()))
        if rc == 0:
            try:
                data = json.loads(out)
            except ValueError:
                failures.append(f"{host.name}: its answer is not JSON")
                continue
            if not data.get("redis"):
                failures.append(f"{host.name}: its gateway has no shared Redis configured")
                continue
            return Report(host.name, data["days"], data["quotas"])
        failures.append(f"{host.name}: {err or f'exit {rc}'}")
    raise UsageError(
        "no serving host could read the usage",
        [*failures, "a gateway older than usage accounting has no service.usage_report: run `installer upgrade`"],
    )


def rows(report: Report, by: Iterable[str] = ("key", "model")) -> list[dict[str, Any]]:
    """Requests and tokens summed over the dimensions not in `by`, sorted by `by`."""
    by = tuple(by)
    totals: dict[tuple[str, ...], dict[str, int]] = {}
    for day, fields in report.days.items():
        for name, value in fields.items():
            kind, caller, model = name.split(":", 2)
            if kind not in _COUNTS:
                continue
            key, _, tenant = caller.partition(_TENANT_MARK)
            where = {"key": key, "model": model, "day": day, "tenant": tenant or "-"}
            group = tuple(where[d] for d in by)
            counts = totals.setdefault(group, dict.fromkeys(_COUNTS.values(), 0))
            counts[_COUNTS[kind]] += value
    return [
        {**dict(zip(by, group, strict=True)), **counts,
         "total_tokens": counts["prompt_tokens"] + counts["completion_tokens"]}
        for group, counts in sorted(totals.items())
    ]


def quota_use(report: Report) -> dict[str, dict[str, Any]]:
    """Each quota key's use in its current period, by key name (tenants' quotas are left out)."""
    return {q["key"]: q for q in report.quotas if "key" in q}


def tenant_quotas(report: Report) -> list[dict[str, Any]]:
    """Each tenant's quota and its use in the current period."""
    return [q for q in report.quotas if "tenant" in q]
