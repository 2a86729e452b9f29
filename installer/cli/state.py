"""`installer state export|import`: move the control machine's state to another machine."""

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from installer.cli.root import StateInventoryOpt, app
from installer.cli.ui import console
from installer.state import deployment_lock
from installer.state_archive import StateArchiveError, crypto, export, restore

state_app = typer.Typer(
    help="Move this deployment's control state (keys, CA, secrets, revisions, audit trail, Terraform state) "
    "to another machine as one encrypted archive.",
    no_args_is_help=True,
)
app.add_typer(state_app, name="state")

PassphraseFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--passphrase-file",
        help=f"Read the passphrase from this file (else ${crypto.PASSPHRASE_ENV}, "
        "else a prompt). Never on the command line.",
    ),
]


@state_app.command("export")
def export_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="The archive to write (0600).")],
    inventory: StateInventoryOpt = None,
    passphrase_file: PassphraseFileOpt = None,
    recipient: Annotated[
        list[str] | None,
        typer.Option(
            "--recipient",
            "-r",
            help="Encrypt to this public key (age1... or an OpenSSH public key) instead of a passphrase; repeatable.",
        ),
    ] = None,
    recipients_file: Annotated[
        list[Path] | None,
        typer.Option(
            "--recipients-file", "-R", help="Encrypt to the public keys in this file, one a line; repeatable."
        ),
    ] = None,
) -> None:
    """Write the state folder's keys, CA, secrets, revisions, audit trail and Terraform state, encrypted."""
    to = crypto.recipients(recipient or [], recipients_file or [])
    secret = None if to else crypto.passphrase(passphrase_file, confirm=True)
    with deployment_lock.whole_state("state export"):
        done = export.export(out, lambda data: crypto.encrypt(data, secret=secret, to=to))
    console.print(
        f"wrote {done.path}: {done.files} files in {done.folders} folders from {done.state}"
        f"{', with the audit key' if done.audit_key else ''}",
        highlight=False,
    )
    for line in done.left_out:
        console.print(f"  left out {line}", highlight=False)
    for name in done.unknown:
        console.print(
            f"  left out {name}: not state this installer writes (copy it yourself if you need it)", highlight=False
        )


@state_app.command("import")
def import_cmd(
    archive: Annotated[Path, typer.Argument(help="The archive `installer state export` wrote.")],
    inventory: StateInventoryOpt = None,
    passphrase_file: PassphraseFileOpt = None,
    identity: Annotated[
        list[Path] | None,
        typer.Option(
            "--identity",
            help="The private key (age identity file or OpenSSH key) the archive was encrypted to; repeatable.",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace a state folder that holds other state (it is kept beside, renamed)."),
    ] = False,
) -> None:
    """Restore an exported state here: checked whole first, then written in one rename."""
    try:
        blob = archive.read_bytes()
    except OSError as exc:
        raise StateArchiveError(f"cannot read {archive}: {exc.strerror or exc}") from exc
    ids = crypto.identities(identity or [])
    if not ids and not crypto.is_passphrase_archive(blob) and blob.startswith(crypto.AGE_MAGIC):
        raise StateArchiveError(
            f"{archive} is encrypted to recipient keys, not a passphrase",
            ["pass --identity with the private key it was encrypted to"],
        )
    secret = None if ids else crypto.passphrase(passphrase_file, confirm=False)
    argv = ["state", "import", str(archive), *(["--force"] if force else [])]
    # Without --force an import writes only into an empty folder, which no command is using; with
    # it, the folder a command may be writing is moved aside.
    with deployment_lock.whole_state("state import") if force else contextlib.nullcontext():
        done = restore.restore(blob, archive, lambda b: crypto.decrypt(b, archive, secret=secret, ids=ids), force, argv)
    if done.unchanged:
        console.print(f"{done.state} already holds this state: nothing to do", highlight=False)
        return
    console.print(f"restored {done.files} files into {done.state}", highlight=False)
    if done.replaced:
        console.print(f"  the state it replaced is kept in {done.replaced}", highlight=False)
    if done.audit_key:
        console.print(f"  the audit trail's key was written to {done.audit_key}", highlight=False)
    console.print("  next: `installer up -i <inventory>` here should converge with no change", highlight=False)
