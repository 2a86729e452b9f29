"""The `cert` column: days until each host's gateway TLS certificate expires, from the
certificate `installer up` last sent it (installer/tls/store.py), coloured by the same limits
that act on it: red within the alert's window (PLITLSCertExpiresSoon, the monitoring role's
monitoring_cert_expiry_warn_days), yellow within tls.renew_before_days (the next `installer up`
re-issues it)."""

from collections.abc import Callable, Sequence

from installer.base.paths import role_defaults
from installer.status.model import Column, Context, Row
from installer.tls import store


def alert_days() -> int:
    """The alert's threshold, from the role that renders the alert (one source of truth)."""
    return int(role_defaults("monitoring")["monitoring_cert_expiry_warn_days"])


def days_text(renew_before_days: int) -> Callable[[float], str]:
    def fmt(days: float) -> str:
        text = f"{days:.0f} d"
        if days < alert_days():  # the alert: expiry - time() < warn_days * 86400
            return f"[bold red]{text}[/]"
        if days <= renew_before_days:
            return f"[yellow]{text}[/]"
        return text

    return fmt


class CertCollector:
    def __init__(self) -> None:
        self.columns: Sequence[Column] = (Column("cert_days_left", "cert", days_text(30)),)

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        tls = ctx.inventory.tls
        # The yellow limit is this inventory's; collect() reads `columns` after the collectors ran.
        self.columns = (Column("cert_days_left", "cert", days_text(tls.renew_before_days)),)
        days = {host: store.days_to_expiry(ctx.inventory, host) for host in sorted({r.host for r in rows})}
        for row in rows:
            row.values["cert_days_left"] = days[row.host]
            if tls.mode == "off":
                continue
            left = days[row.host]
            if left is None:
                row.problems.append("no TLS certificate for this host on the control machine yet; run `installer up`")
            elif left <= 0:
                row.problems.append(f"TLS certificate expired {-left:.0f} day(s) ago; run `installer up` to renew it")
