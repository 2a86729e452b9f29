"""The `ready` column: each gateway's /readyz, asked now, says which of its engines are ready."""

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from installer.status.model import Column, Context, Row


def gateway_base(address: str, port: int, scheme: str = "http") -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{port}"


def readyz(base: str, timeout_s: float) -> dict[str, Any]:
    """The gateway's /readyz body ({"status", "engines": {name: bool}}); 503 bodies count too."""
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=timeout_s) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            return json.load(exc)
        except ValueError:
            return {"status": f"HTTP {exc.code}", "engines": {}}


def _yes_no(ready: bool) -> str:
    return "[green]ready[/]" if ready else "[bold red]NOT READY[/]"


class ReadinessCollector:
    columns: Sequence[Column] = (Column("ready", "ready", _yes_no),)

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        inv = ctx.inventory
        addresses = sorted({r.address for r in rows})

        def ask(address: str) -> tuple[str, dict[str, Any] | str]:
            try:
                return address, readyz(gateway_base(address, inv.ports.gateway), ctx.timeout_s)
            except (OSError, ValueError) as exc:
                return address, f"gateway unreachable: {exc}"

        with ThreadPoolExecutor(max_workers=max(1, min(16, len(addresses)))) as pool:
            answers = dict(pool.map(ask, addresses))
        for row in rows:
            answer = answers[row.address]
            if isinstance(answer, str):
                row.values["ready"] = False
                row.problems.append(answer)
                continue
            engines = answer.get("engines", {})
            row.values["ready"] = bool(engines.get(row.engine))
            if not row.values["ready"]:
                row.problems.append(f"gateway /readyz: {answer.get('status')}")
