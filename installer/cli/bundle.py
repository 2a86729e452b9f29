"""`installer bundle build|verify`: the offline bundle on the control machine."""

from pathlib import Path
from typing import Annotated

import typer

from installer.bundle import build as bundle_build
from installer.cli import app
from installer.inventory import load_inventory
from installer.ui import console

bundle_app = typer.Typer(help="Build and verify offline bundles.", no_args_is_help=True)
app.add_typer(bundle_app, name="bundle")


@bundle_app.command("build")
def build_cmd(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="Inventory YAML file.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Bundle tar file to write.")],
) -> None:
    """Collect every byte the inventory's hosts need into one checksummed bundle file."""
    inv = load_inventory(inventory)
    root, man, built = bundle_build.build(inv, progress=lambda m: console.print(f"  fetching {m}"))
    bundle_build.write_tar(root, output)
    console.print(
        f"[green]{'built' if built else 'cached'}[/] bundle {man.bundle_id[:12]} "
        f"({len(man.files)} files, {man.total_size / 1e9:.2f} GB) -> {output}"
    )


@bundle_app.command("verify")
def verify_cmd(
    bundle: Annotated[Path, typer.Argument(help="Bundle tar file or directory.")],
) -> None:
    """Check every file of a bundle against its manifest (size and sha256)."""
    _root, man = bundle_build.open_bundle(bundle)
    console.print(f"[green]OK[/] bundle {man.bundle_id[:12]}: {len(man.files)} files verified")
