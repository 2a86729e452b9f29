#!/usr/bin/python3 -I
"""keepalived's vrrp_script: exit 0 when this host's gateway answers /readyz with 200 (over HTTPS
verified with the deployment CA when one is given), 1 otherwise. Two failures in a row put the
VRRP instance in FAULT, which gives up the virtual IP at once (a priority-0 advert).

Usage: readyz_check.py URL TIMEOUT_S [CA_FILE] (the CA last: with TLS off there is none, and
keepalived drops empty arguments). Standard library only: it runs with the
host's own python3, not the gateway's venv, so a broken release cannot break the check."""

import ssl
import sys
import urllib.request


def _args(argv: list[str]) -> tuple[str, float, str | None]:
    """(url, timeout, CA). Also the earlier order, URL CA TIMEOUT: during an upgrade the new
    script runs under the old keepalived.conf until keepalived reloads, and a failing check on
    every host at once would put them all in FAULT (the VIP gone)."""
    rest = [a for a in argv[2:] if a]
    numbers = [a for a in rest if a.replace(".", "", 1).isdigit()]
    others = [a for a in rest if a not in numbers]
    return argv[1], float(numbers[0]) if numbers else 1.0, others[0] if others else None


def main(argv: list[str]) -> int:
    url, timeout, ca = _args(argv)
    ctx = ssl.create_default_context(cafile=ca) if url.startswith("https://") else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as answer:
            return 0 if answer.status == 200 else 1
    except (OSError, ValueError) as exc:  # HTTPError (503 draining / no ready engine) is an OSError
        print(f"readyz_check: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
