"""`installer usage -i site.yml [--since 7d] [--by key,model,day,tenant] [--csv|--json]`: requests
and tokens per key (or token subject), model, day and tenant, as the gateways recorded them
(installer/flows/usage.py)."""

import csv
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from installer.cli.root import InventoryOpt, app
from installer.cli.ui import console, table
from installer.flows import usage
from installer.inventory import load_inventory


@app.command("usage")
def usage_cmd(
    inventory: InventoryOpt,
    since: Annotated[
        str, typer.Option("--since", help="From this UTC day on: 7d (seven days ago), today, or YYYY-MM-DD.")
    ] = "7d",
    by: Annotated[
        str, typer.Option("--by", help="Group by any of key, model, day, tenant (comma-separated); the rest is summed.")
    ] = "key,model",
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show requests, prompt tokens and completion tokens per key, model and day (never a secret)."""
    if as_csv and as_json:
        raise typer.BadParameter("choose one of --csv and --json")
    first = usage.parse_since(since)
    dims = usage.parse_by(by)
    report = usage.fetch(load_inventory(Path(inventory)), first)
    rows = usage.rows(report, dims)
    columns = [*dims, "requests", "prompt_tokens", "completion_tokens", "total_tokens", "cut_requests"]
    if as_json:
        print(json.dumps({"since": first.isoformat(), "by": list(dims), "rows": rows,
                          "tenant_quotas": usage.tenant_quotas(report)}, indent=2))
        return
    if as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return
    if not rows:
        console.print(f"no usage recorded since {first.isoformat()} (UTC)")
        return
    total = [sum(int(r[c]) for r in rows) for c in columns[len(dims):]]
    lines = [[str(r[c]) for c in columns] for r in rows]
    lines.append(["total", *[""] * (len(dims) - 1), *map(str, total)])
    console.print(table(f"usage since {first.isoformat()} (UTC), read through {report.host}", columns, lines))
    quotas = usage.tenant_quotas(report)
    if quotas:
        console.print(table("tenant quotas, this period", ["tenant", "quota_tokens", "period", "used", "resets"],
                            [[str(q[c]) for c in ("tenant", "quota_tokens", "period", "used", "resets")]
                             for q in quotas]))
