"""`installer verify -i site.yml --weights [--host NAME]`: every weights folder each host serves,
hashed whole against the signed list, ignoring the verifier's cache (installer/flows/weights_check.py)."""

from pathlib import Path
from typing import Annotated

import typer

from installer.base.errors import InstallerError
from installer.cli.root import InventoryOpt, app
from installer.cli.ui import console, table
from installer.flows import weights_check as check
from installer.inventory import load_inventory


@app.command("verify")
def verify_cmd(
    inventory: InventoryOpt,
    weights: Annotated[
        bool, typer.Option("--weights", help="Hash every weights file on the hosts, ignoring the cache.")
    ] = False,
    host: Annotated[
        list[str] | None, typer.Option("--host", help="Only this host (repeat for several). Default: every host.")
    ] = None,
) -> None:
    """Check what the hosts hold against what was signed (today: the weights, with --weights)."""
    if not weights:
        raise typer.BadParameter("say what to verify: --weights")
    results = check.verify(load_inventory(Path(inventory)), host)
    rows = [
        [c.folder.host, c.folder.folder, c.folder.root, str(c.files), f"{c.size / 1e9:.2f} GB",
         f"{c.seconds:.1f} s", f"{c.size / 1e9 / c.seconds:.2f} GB/s" if c.seconds > 0 else "-",
         "ok" if c.ok else "REFUSED"]
        for c in results
    ]
    console.print(table("weights, every byte hashed", ["host", "folder", "path", "files", "size", "time",
                                                      "speed", "result"], rows))
    bad = [c for c in results if not c.ok]
    if bad:
        raise InstallerError(
            f"{len(bad)} weights folder(s) differ from the signed list",
            [f"{c.folder.host}: {c.folder.root}: {p}" for c in bad for p in c.problems[:20]],
        )
