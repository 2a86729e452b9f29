"""The `ready` column: each host's gateway, asked now (/readyz), says whether that host's
engines are ready. Over HTTPS verified with the deployment's CA, as `installer up` proves it."""

import ssl
from collections.abc import Sequence
from typing import Any

from installer.hosts import prove, remote
from installer.status.model import Column, Context, Row


def _yes_no(ready: bool) -> str:
    return "[green]ready[/]" if ready else "[bold red]NOT READY[/]"


class ReadinessCollector:
    columns: Sequence[Column] = (Column("ready", "ready", _yes_no, brief=True),)

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        inv = ctx.inventory
        ca = prove.ca_file(inv)
        if ca is not None and not ca.is_file():
            for row in rows:
                row.values["ready"] = None
                row.problems.append(f"no CA certificate at {ca} to verify the gateways with; run `installer up`")
            return
        tls = ssl.create_default_context(cafile=str(ca)) if ca else None
        addresses = sorted({r.address for r in rows})

        def ask(address: str) -> tuple[str, dict[str, Any] | str]:
            base = prove.gateway_base(inv, address)
            try:
                return address, prove.readyz(base, tls, inv.deployment, ctx.timeout_s)
            except (OSError, ValueError) as exc:
                return address, prove.tls_problem(exc, base, ca) or f"gateway unreachable: {exc}"

        answers = dict(remote.each(addresses, ask))
        for row in rows:
            answer = answers[row.address]
            if isinstance(answer, str):
                row.values["ready"] = False
                row.problems.append(answer)
                continue
            row.values["ready"] = bool(answer.get("engines", {}).get(row.engine))
            if not row.values["ready"]:
                row.problems.append(f"engine {row.engine} not ready (its gateway's /readyz: {answer.get('status')})")
