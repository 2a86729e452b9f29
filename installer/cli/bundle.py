"""`installer bundle build|verify|keygen|inspect|sbom|diff`: offline bundles on the control machine."""

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.filesize import decimal

from installer.bundle import build as bundle_build
from installer.bundle import contents, sbom_read, sign, signed_tar
from installer.bundle.manifest import Manifest, parse
from installer.cli.root import InventoryOpt, app
from installer.cli.ui import console, table
from installer.inventory import load_inventory

bundle_app = typer.Typer(
    help="Build, sign, verify, inspect and compare offline bundles.", no_args_is_help=True
)
app.add_typer(bundle_app, name="bundle")

BundleArg = Annotated[
    Path, typer.Argument(help="Bundle tar file or directory.", show_default=False)
]
TrustedKeysOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--trusted-key",
        help="Public key (.pub) whose signatures are accepted; repeatable. "
        "Default: every *.pub under .installer/keys/.",
        show_default=False,
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="Accept an unsigned or untrusted bundle (checksums are still checked). Unsafe.",
    ),
]


def warn_insecure(check: sign.SignatureCheck) -> None:
    """Say loudly, on its own lines, that a bundle's origin was not established."""
    if check.trusted_key is None:
        console.print(f"[bold red on yellow] INSECURE [/] [bold red]{check.insecure_reason}[/]")
        console.print(
            "[bold red]           --insecure: this bundle's origin is NOT verified; "
            "anyone who could change it could run code as root on every host.[/]"
        )


@bundle_app.command("build")
def build_cmd(
    inventory: InventoryOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="Bundle tar file to write.")],
    sign_key: Annotated[
        Path | None,
        typer.Option(
            help="ed25519 private key to sign with. Default: .installer/keys/bundle-signing.key "
            "when it exists (make it with `installer bundle keygen`).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Collect every byte the inventory's hosts need into one checksummed, signed bundle file."""
    inv = load_inventory(inventory)
    out = signed_tar.build_tar(inv, output, sign_key, progress=lambda m: console.print(f"  fetching {m}"))
    man = out.manifest
    console.print(
        f"[green]{'built' if out.built else 'cached'}[/] bundle {man.bundle_id[:12]} "
        f"({len(man.files)} files, {man.total_size / 1e9:.2f} GB) -> {output}"
    )
    if out.key is None:
        console.print(
            "[yellow]unsigned:[/] no signing key (make one with `installer bundle keygen`); "
            "`installer up --bundle` refuses unsigned bundles unless given --insecure"
        )
    else:
        console.print(f"signed with key {out.key_id} ({out.key})")


@bundle_app.command("verify")
def verify_cmd(
    bundle: BundleArg,
    trusted_key: TrustedKeysOpt = None,
    insecure: InsecureOpt = False,
) -> None:
    """Check a bundle's signature, then every file against its manifest (size and sha256)."""
    start = time.monotonic()
    man, check = bundle_build.check_bundle(bundle, sign.Trust(tuple(trusted_key or ()), insecure))
    seconds = time.monotonic() - start
    warn_insecure(check)
    console.print(
        f"[green]OK[/] bundle {man.bundle_id[:12]}: {len(man.files)} files, "
        f"{decimal(man.total_size)} verified in {seconds:.1f} s "
        f"({decimal(int(man.total_size / max(seconds, 1e-9)))}/s)"
    )
    if check.trusted_key is not None:
        console.print(check.describe)


@bundle_app.command("keygen")
def keygen_cmd(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Where to write the key pair. Default: the state's keys/ (.installer/keys/)."),
    ] = None,
    name: Annotated[str, typer.Option(help="File name of the pair (NAME.key, NAME.pub).")] = (
        sign.KEY_NAME
    ),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing key pair.")] = False,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory", "-i",
            help="Default --dir: the keys/ of this deployment's state (next to the inventory), "
            "where `bundle build -i` and `up -i` look.",
        ),
    ] = None,
) -> None:
    """Make an ed25519 key pair to sign bundles with (private key 0600, public key to share)."""
    pair = sign.keygen(directory, name, force=force)
    console.print(f"[green]created[/] key {pair.key_id}")
    console.print(f"  private: {pair.private_key} (mode 600; keep it on the build machine)")
    console.print(f"  public:  {pair.public_key}")
    console.print(
        "Copy the public key to the control machine that installs (into its .installer/keys/, "
        "or pass --trusted-key), and compare the key id out of band."
    )


def _manifest_of(bundle: Path) -> tuple[Manifest, bytes, bytes | None]:
    manifest_bytes, sig = bundle_build.read_meta(bundle)
    return parse(manifest_bytes, bundle), manifest_bytes, sig


def _signature_line(manifest_bytes: bytes, sig: bytes | None, trusted: list[Path] | None) -> str:
    check = sign.check_signature(
        manifest_bytes, sig, sign.Trust(tuple(trusted or ()), insecure=True), "inspected"
    )
    if check.trusted_key is not None:
        return f"[green]{check.describe}[/]"
    return f"[yellow]{check.insecure_reason}[/]"


@bundle_app.command("inspect")
def inspect_cmd(
    bundle: BundleArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    trusted_key: TrustedKeysOpt = None,
) -> None:
    """Show what a bundle holds: components, versions, files and size (from its manifest)."""
    man, manifest_bytes, sig = _manifest_of(bundle)
    groups = contents.by_component(man)
    if as_json:
        print(
            json.dumps(
                {
                    "bundle_id": man.bundle_id,
                    "release_id": man.release_id,
                    "target": man.target,
                    "files": len(man.files),
                    "size": man.total_size,
                    "signed": sig is not None,
                    "size_by_kind": contents.size_by_kind(man),
                    "components": [
                        {
                            "kind": g.component.kind,
                            "name": g.component.name,
                            "version": g.component.version,
                            "files": len(g.files),
                            "size": g.size,
                        }
                        for g in groups
                    ],
                },
                indent=1,
            )
        )
        return
    target = ", ".join(f"{k} {v}" for k, v in sorted(man.target.items()))
    console.print(
        f"bundle {man.bundle_id[:12]} (release {man.release_id}) for {target}: "
        f"{len(man.files)} files, {decimal(man.total_size)}"
    )
    console.print(f"signature: {_signature_line(manifest_bytes, sig, trusted_key)}")
    rows = [
        [
            g.component.kind,
            g.component.name,
            g.component.version or "-",
            str(len(g.files)),
            decimal(g.size),
        ]
        for g in groups
    ]
    console.print(table("contents", ["kind", "component", "version", "files", "size"], rows))
    kinds = ", ".join(f"{k} {decimal(v)}" for k, v in contents.size_by_kind(man).items())
    console.print(f"by kind: {kinds}")
    console.print("[dim](from the manifest; `installer bundle verify` checks every byte)[/]")


@bundle_app.command("sbom")
def sbom_cmd(
    bundle: BundleArg,
    fmt: Annotated[
        str,
        typer.Option("--format", help="cyclonedx-json (the signed file as is) or table."),
    ] = "cyclonedx-json",
    trusted_key: TrustedKeysOpt = None,
    insecure: InsecureOpt = False,
) -> None:
    """Print a bundle's software bill of materials (its signature and sha256 are checked first)."""
    if fmt not in ("cyclonedx-json", "table"):
        raise typer.BadParameter(f"{fmt!r}: use cyclonedx-json or table", param_hint="--format")
    found = sbom_read.read(bundle, sign.Trust(tuple(trusted_key or ()), insecure))
    if fmt == "cyclonedx-json":
        if found.signature.trusted_key is None:  # on stderr: stdout is the document
            typer.echo(f"INSECURE: {found.signature.insecure_reason}", err=True)
        print(found.text, end="")
        return
    warn_insecure(found.signature)
    rows = [[e.kind, e.name, e.version or "-", e.licence or "-", e.sha256[:12]] for e in found.entries]
    console.print(table("SBOM", ["kind", "component", "version", "licence", "sha256"], rows))
    console.print(f"{len(rows)} components")


def _signature_json(check: sign.SignatureCheck) -> dict[str, object]:
    return {"verified": check.trusted_key is not None, "key_id": check.key_id,
            "trusted_key": None if check.trusted_key is None else str(check.trusted_key),
            "problem": check.insecure_reason}


def _warn_unverified(full: sbom_read.Diff, paths: dict[str, Path], on_stderr: bool) -> None:
    """Say, before anything else, which side's origin was not established: its figures may be
    anyone's, so the comparison must not read as one of signed bundles."""
    for side, reason in full.unverified:
        if on_stderr:  # stdout is the JSON document
            typer.echo(f"INSECURE: {side} bundle {paths[side]}: {reason}; compared only because of --insecure",
                       err=True)
            continue
        console.print(f"[bold red on yellow] INSECURE [/] [bold red]{side} bundle {paths[side]}: {reason}[/]")
    if full.unverified and not on_stderr:
        console.print(
            "[bold red]           --insecure: this comparison is of bundles whose origin is NOT verified; "
            "it says nothing about what a signed bundle holds.[/]"
        )


@bundle_app.command("diff")
def diff_cmd(
    old: Annotated[Path, typer.Argument(help="The bundle the hosts run now.", show_default=False)],
    new: Annotated[Path, typer.Argument(help="The bundle to upgrade to.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    trusted_key: TrustedKeysOpt = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Compare an unsigned or untrusted bundle anyway; the output marks it INSECURE. Unsafe.",
        ),
    ] = False,
) -> None:
    """What an upgrade from OLD to NEW changes: components, files, and bytes sent to each host.

    Both bundles' signatures are checked first, as `bundle verify` checks them."""
    full = sbom_read.diff(old, new, sign.Trust(tuple(trusted_key or ()), insecure))
    d = full.bundle
    paths = {"old": old, "new": new}
    _warn_unverified(full, paths, on_stderr=as_json)
    if as_json:
        print(
            json.dumps(
                {
                    "old": {"bundle_id": d.old.bundle_id, "release_id": d.old.release_id},
                    "new": {"bundle_id": d.new.bundle_id, "release_id": d.new.release_id},
                    "signatures": {"old": _signature_json(full.old_signature),
                                   "new": _signature_json(full.new_signature)},
                    "components": [c.__dict__ for c in d.components],
                    "files": {
                        "added": len(d.added_files),
                        "removed": len(d.removed_files),
                        "changed": len(d.changed_files),
                    },
                    "transfer_bytes": d.transfer_bytes,
                    "new_size": d.new.total_size,
                    "sbom_changes": None if full.sbom is None else [c.__dict__ for c in full.sbom],
                },
                indent=1,
            )
        )
        return
    console.print(f"{old} ({d.old.bundle_id[:12]}) -> {new} ({d.new.bundle_id[:12]})")
    for side, check in (("old", full.old_signature), ("new", full.new_signature)):
        if check.trusted_key is not None:
            console.print(f"{side}: [green]{check.describe}[/]")
    sign_of = {"added": "[green]+[/]", "removed": "[red]-[/]", "changed": "[yellow]~[/]"}
    rows = [
        [
            sign_of[c.change],
            c.kind,
            c.name,
            c.old_version or "-",
            c.new_version or "-",
            f"{'+' if c.new_size >= c.old_size else '-'}{decimal(abs(c.new_size - c.old_size))}",
        ]
        for c in d.components
    ]
    if rows:
        console.print(
            table("component changes", ["", "kind", "component", "old", "new", "size change"], rows)
        )
    else:
        console.print("no component changes")
    if full.sbom is None:
        console.print("[dim]SBOM: not compared (a bundle built before bundles carried one)[/]")
    elif full.sbom:
        sbom_rows = [
            [sign_of.get(c.change, "[yellow]~[/]"), c.kind, c.name, c.old_version or "-",
             c.new_version or "-"]
            for c in full.sbom
        ]
        console.print(table("SBOM component changes", ["", "kind", "component", "old", "new"], sbom_rows))
    else:
        console.print("SBOM: no component changes")
    console.print(
        f"files: {len(d.added_files)} added, {len(d.removed_files)} removed, "
        f"{len(d.changed_files)} changed"
    )
    console.print(
        f"to send to each host that holds the old bundle: {decimal(d.transfer_bytes)} "
        f"of {decimal(d.new.total_size)}"
    )
    if d.same_release:
        console.print(
            f"release {d.new.release_id} stays (configuration code or weights only): no engine reinstall"
        )
    else:
        console.print(
            f"release {d.old.release_id} -> {d.new.release_id}: hosts build a new release "
            "from the bundle and restart its services"
        )
    if full.unverified:  # again at the end, where a long table leaves the reader
        sides = " and ".join(f"{side} ({paths[side]})" for side, _ in full.unverified)
        console.print(f"[bold red on yellow] INSECURE [/] [bold red]not verified: {sides}[/]")
