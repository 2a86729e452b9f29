"""The control machine's way to the release controller: `installer release` runs this on the
controller's host over SSH (installer/hosts/remote.py, as root), with one JSON request on stdin and
one JSON answer on stdout. It reads the controller's own settings file (0600, with the Redis URL
and its password), so the password never leaves the host and the control machine needs no
route to Redis (which listens on loopback on a single host).

    {"op": "show"}                                  spec, state, lease holder, the audit's tail
    {"op": "start", "spec": {...}}                  a new release, refused while one runs
    {"op": "stop", "release": id}                   abort: canary 0%, fenced (the lease taken over)
    {"op": "step", "release": id, "step": n}        promote: the step after n, fenced
    {"op": "finish", "release": id}                 the spec taken away once the cleanup is done

Exit 0 with the answer; exit 3 with {"refused": why} when the request does not fit the release
in Redis (nothing written); any other failure is a traceback's last line on stderr.
"""

import argparse
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

from service import release_store
from service.release_controller import redis_client, settings_of

REFUSED = 3
AUDIT_TAIL = 200  # decisions the answer to `show` carries: a view polls it, it is not an archive


def audit_tail(path: str | None, release: str | None) -> list[dict[str, Any]]:
    """The last decisions of `release` in the controller's audit log (none without one)."""
    if not path or release is None or not Path(path).exists():
        return []
    with open(path) as f:
        lines = deque(f, maxlen=AUDIT_TAIL * 4)
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("release") == release:
            out.append(record)
    return out[-AUDIT_TAIL:]


def handle(client: Any, settings: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    lease_ms = int(settings.get("lease_ms", 10_000))
    if op == "show":
        view = release_store.Store(client, "view")
        spec, state = view.spec(), view.state()
        release = (spec or {}).get("id") or (state or {}).get("release")
        return {"spec": spec, "state": state, "lease": view.lease_holder(),
                "audit": audit_tail(settings.get("audit_log"), release)}
    if op == "start":
        release_store.push_spec(client, request["spec"])
        return {"started": request["spec"]["id"]}
    if op == "stop":
        return {"state": release_store.command(client, request["release"], "stop", lease_ms=lease_ms)}
    if op == "step":
        return {"state": release_store.command(client, request["release"], "step", lease_ms=lease_ms,
                                               step=int(request["step"]))}
    if op == "finish":
        return {"finished": release_store.finish(client, request["release"])}
    raise ValueError(f"no op {op!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m service.release_admin")
    parser.add_argument("--settings", type=Path, required=True)
    args = parser.parse_args(argv)
    settings = settings_of(args.settings)
    client = redis_client(settings)
    try:
        answer = handle(client, settings, json.loads(sys.stdin.read()))
    except release_store.Refused as exc:
        print(json.dumps({"refused": str(exc)}))
        raise SystemExit(REFUSED) from None
    print(json.dumps(answer, sort_keys=True))


if __name__ == "__main__":
    main()
