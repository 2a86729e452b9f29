"""`installer ca export`: the deployment CA's certificate, for clients to trust."""

import sys

import typer

from installer.cli.root import InventoryOpt, app
from installer.inventory import load_inventory
from installer.tls import store

ca_app = typer.Typer(help="The deployment's certificate authority (TLS).", no_args_is_help=True)
app.add_typer(ca_app, name="ca")


@ca_app.command("export")
def export_cmd(
    inventory: InventoryOpt,
) -> None:
    """Print the CA certificate (PEM) that clients pass as their CA bundle."""
    # Raw bytes on stdout, so `installer ca export -i site.yml > ca.pem` is the file itself.
    sys.stdout.write(store.ca_certificate(load_inventory(inventory)).decode())
