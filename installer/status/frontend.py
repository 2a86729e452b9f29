"""The `vip` column: which gateway host holds the frontend's virtual IP now, read from each
serving host's `ip -o addr` over the one SSH fan-out (installer/hosts/remote.py). None of them, or
more than one (VRRP split: the hosts cannot hear each other), is a problem on every row."""

from collections.abc import Sequence
from itertools import pairwise

from installer.hosts import remote
from installer.hosts.ssh import target
from installer.inventory import Inventory
from installer.status.model import Column, Context, Row

COMMAND = "ip -o addr show"


def _held(held: bool) -> str:
    return "[green]holds VIP[/]" if held else "backup"


def holds(ip_addr_text: str, vip: str) -> bool:
    """Whether `ip -o addr show` output lists `vip` (an address without prefix) on some interface."""
    for line in ip_addr_text.splitlines():
        fields = line.split()
        # "2: eth0    inet 10.0.0.100/24 scope global secondary eth0" (family, then address/prefix)
        for family, address in pairwise(fields):
            if family in ("inet", "inet6") and address.split("/", 1)[0] == vip:
                return True
    return False


def holders(inv: Inventory, results: Sequence[remote.Result]) -> tuple[list[str], dict[str, str]]:
    """(hosts that hold the VIP, {host: why it could not be read})."""
    assert inv.frontend is not None
    vip = inv.frontend.address()
    return [r.host for r in results if r.ok and holds(r.text, vip)], {r.host: r.why for r in results if not r.ok}


class FrontendCollector:
    columns: Sequence[Column] = (Column("vip", "vip", _held, brief=True),)

    def collect(self, ctx: Context, rows: list[Row]) -> None:
        inv = ctx.inventory
        if inv.frontend is None or not rows:
            return
        names = list(dict.fromkeys(r.host for r in rows))
        by_name = {h.name: h for h in inv.hosts}
        results = remote.run([target(inv, by_name[n]) for n in names], COMMAND, timeout=ctx.timeout_s)
        held, unread = holders(inv, results)
        vip = inv.frontend.vip
        for row in rows:
            if row.host in unread:
                row.problems.append(f"could not read its addresses for the VIP: {unread[row.host]}")
                continue
            row.values["vip"] = row.host in held
            if not held and not unread:
                row.problems.append(f"no gateway host holds the VIP {vip}: clients of it get no answer "
                                    "(`journalctl -u keepalived` on the hosts says why)")
            elif len(held) > 1 and row.host in held:
                row.problems.append(f"the VIP {vip} is on {', '.join(held)} at once: these hosts do not hear each "
                                    "other's VRRP adverts (a firewall dropping IP protocol 112?)")
