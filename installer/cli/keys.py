"""`installer keys create|list|revoke`: API keys for the gateways."""

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from installer.cli.root import StateInventoryOpt, app
from installer.cli.ui import console, table
from installer.secrets import keys
from installer.state import deployment_lock

if TYPE_CHECKING:
    from installer.flows.keys_push import Checked

keys_app = typer.Typer(
    help="Create, list and revoke the gateways' API keys, and set their token quotas.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")

InventoryOpt = Annotated[
    Path | None,
    typer.Option("--inventory", "-i", help="Send the updated key hashes to this deployment's gateways now."),
]


QuotaTokensOpt = Annotated[
    int | None,
    typer.Option("--quota-tokens", help="Tokens (prompt + completion) per --quota-period, across every gateway."),
]
QuotaPeriodOpt = Annotated[
    Literal["day", "month"] | None,
    typer.Option("--quota-period", help="The quota's period: a UTC day or calendar month."),
]


AdoptOpt = Annotated[
    bool,
    typer.Option(
        "--adopt",
        help="With --inventory: send the key list even to hosts running a revision this state does "
        "not know (it replaces every key they have).",
    ),
]


def _checked(inventory: Path | None, adopt: bool, command: str) -> "Checked | None":
    """With --inventory, the hosts' revisions judged before the key store changes."""
    if inventory is None:
        return None
    from installer.flows.keys_push import check
    from installer.inventory import load_inventory

    checked = check(load_inventory(inventory), adopt=adopt, command=command)
    for line in checked.adopted:
        console.print(f"[yellow]adopting {line}[/]")
    return checked


def _send(checked: "Checked | None", done: str) -> None:
    if checked is None:
        console.print(f"[dim]{done}; run the deploy again (or pass --inventory) to update the gateways.[/]")
        return
    from installer.flows.keys_push import send

    hosts = send(checked)
    console.print(f"{done}; the gateways of {', '.join(hosts)} have it now.")


@keys_app.command("create")
def create_cmd(
    name: Annotated[str, typer.Option("--name", help="Key name (metrics and logs show it).")],
    rpm: Annotated[
        int | None, typer.Option(help="Requests per minute; no limit if left out.")
    ] = None,
    tpm: Annotated[
        int | None, typer.Option(help="Tokens per minute (prompt + completion).")
    ] = None,
    models: Annotated[
        str | None, typer.Option(help="Comma-separated models it may use; all if left out.")
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(help="YYYY-MM-DD (stops at 00:00 UTC that day) or an ISO date-time."),
    ] = None,
    quota_tokens: QuotaTokensOpt = None,
    quota_period: QuotaPeriodOpt = None,
    release_tester: Annotated[
        bool,
        typer.Option(help="May send the X-Release-Stage header to reach a canary (kept out of its verdict)."),
    ] = False,
    inventory: InventoryOpt = None,
    adopt: AdoptOpt = False,
) -> None:
    """Create a key and print its secret, once: it is stored only as a hash."""
    with deployment_lock.key_store("keys create"):
        checked = _checked(inventory, adopt, "keys create")
        model_list = [m.strip() for m in models.split(",") if m.strip()] if models else None
        record, secret = keys.create(
            name,
            rpm=rpm,
            tpm=tpm,
            models=model_list,
            expires=keys.parse_expiry(expires) if expires else None,
            quota_tokens=quota_tokens,
            quota_period=quota_period,
            release_tester=release_tester,
        )
        console.print(f"[green]created[/] key [bold]{record.name}[/]. Its secret, shown only now:")
        # Plain print, no markup or wrapping, so it can be copied or piped exactly.
        print(secret)
        _send(checked, f"key {record.name} created")


@keys_app.command("list")
def list_cmd(
    inventory: StateInventoryOpt = None,
) -> None:
    """List keys with their limits, quotas and status (never a secret); with --inventory, each
    quota's use in its current period, read from the deployment's Redis."""
    now = datetime.now(UTC)
    store = keys.load()
    use: dict[str, dict[str, object]] = {}
    if inventory is not None and any(k.quota_tokens and k.status(now) == "active" for k in store.keys):
        from installer.base.errors import InstallerError
        from installer.flows.usage import fetch, quota_use
        from installer.inventory import load_inventory

        try:
            use = quota_use(fetch(load_inventory(inventory), now.date()))
        except InstallerError as exc:  # the keys are still worth listing, without their use
            console.print(f"[yellow]quota use not shown: {exc}[/]")

    def quota(k: "keys.KeyRecord") -> str:
        if not k.quota_tokens:
            return "-"
        seen = use.get(k.name) if k.status(now) == "active" else None
        if seen is None:
            return f"{k.quota_tokens}/{k.quota_period}"
        return f"{seen['used']} of {k.quota_tokens}/{k.quota_period} (resets {seen['resets']})"

    rows = [
        [
            k.name,
            k.status(now),
            k.sha256[:8],
            str(k.rpm or "-"),
            str(k.tpm or "-"),
            ",".join(k.models) or "all",
            quota(k),
            k.expires.strftime("%Y-%m-%d %H:%M") if k.expires else "-",
            k.created.strftime("%Y-%m-%d %H:%M"),
        ]
        for k in store.keys
    ]
    console.print(
        table(
            "API keys",
            ["name", "status", "sha256", "rpm", "tpm", "models", "quota (tokens)", "expires", "created"],
            rows,
        )
    )


@keys_app.command("revoke")
def revoke_cmd(
    name: Annotated[str, typer.Argument(help="Name of the key to revoke.")],
    inventory: InventoryOpt = None,
    adopt: AdoptOpt = False,
) -> None:
    """Revoke a key: the gateways refuse it once they have the updated hash file."""
    with deployment_lock.key_store("keys revoke"):
        checked = _checked(inventory, adopt, "keys revoke")
        keys.revoke(name)
        console.print(f"[green]revoked[/] key [bold]{name}[/].")
        _send(checked, f"key {name} revoked")


@keys_app.command("quota")
def quota_cmd(
    name: Annotated[str, typer.Argument(help="Name of the key.")],
    quota_tokens: QuotaTokensOpt = None,
    quota_period: QuotaPeriodOpt = None,
    remove: Annotated[bool, typer.Option("--remove", help="Remove the key's quota.")] = False,
    inventory: InventoryOpt = None,
    adopt: AdoptOpt = False,
) -> None:
    """Set or remove an existing key's token quota. Tokens counted under its previous quota of
    the same period (day or month) still count; a key that had none starts the period at 0."""
    if remove == (quota_tokens is not None or quota_period is not None):
        raise typer.BadParameter("give --quota-tokens N --quota-period day|month, or --remove")
    with deployment_lock.key_store("keys quota"):
        checked = _checked(inventory, adopt, "keys quota")
        record = keys.set_quota(name, quota_tokens, quota_period)
        what = f"{record.quota_tokens} tokens per {record.quota_period}" if record.quota_tokens else "none"
        console.print(f"[green]quota[/] of key [bold]{name}[/]: {what}.")
        _send(checked, f"key {name}'s quota set")
