"""The inventory's optional `frontend:` section: one virtual IP for clients, held by keepalived
(VRRP) on one gateway host at a time and moved when that host dies or its gateway's /readyz
says it is not ready (playbooks/roles/keepalived, docs/ha.md#one-address-for-clients).

Only the section's own shape is checked here; how it agrees with the hosts (the VIP on their
subnet, at least two gateway hosts, baremetal only) is installer/inventory/frontend_checks.py,
which `validate` and `up` both run.
"""

import re
from ipaddress import ip_interface
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# A Linux interface name: at most 15 bytes (IFNAMSIZ - 1), no '/', space or ':' (an alias).
_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _vip(value: str) -> str:
    """`address/prefix`, normalised: keepalived adds the address with that prefix, and the
    prefix is how validate knows the subnet the hosts must share."""
    if "/" not in value:
        raise ValueError(
            f"{value!r} has no prefix length; write it as on the hosts' interface, e.g. {value}/24"
        )
    try:
        iface = ip_interface(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not an address/prefix such as 192.0.2.10/24 ({exc})") from None
    if iface.ip == iface.network.network_address and iface.network.prefixlen < iface.max_prefixlen - 1:
        raise ValueError(f"{value!r} is its subnet's network address; pick a free host address in it")
    if iface.version == 4 and iface.ip == iface.network.broadcast_address and iface.network.prefixlen < 31:
        raise ValueError(f"{value!r} is its subnet's broadcast address; pick a free host address in it")
    if iface.ip.is_loopback or iface.ip.is_multicast or iface.ip.is_unspecified or iface.ip.is_link_local:
        raise ValueError(f"{value!r} cannot be a client address (loopback, multicast, link-local or 0)")
    # The VRRP preflight listens for IPv4 adverts only (installer/preflight/vrrp.py), so an IPv6
    # router id clash would pass unheard: refused here rather than checked by half (review, #37).
    if iface.version == 6:
        raise ValueError(
            f"{value!r} is an IPv6 address; the frontend supports an IPv4 VIP only for now (VRRP's "
            "router-id check listens on IPv4). Give the gateway hosts IPv4 addresses and an IPv4 VIP "
            "on their subnet, or put your own load balancer in front of the gateways' port"
        )
    return str(iface)


def _dns_name(value: str) -> str:
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not all(_DNS_LABEL.fullmatch(x) for x in labels) or labels[-1].isdigit():
        raise ValueError(
            f"{value!r} is not a DNS name (letters, digits, '-' and '.', each part starting and ending "
            "with a letter or digit); the address itself goes in vip"
        )
    return value.removesuffix(".").lower()


def _ifname(value: str) -> str:
    if not _IFNAME.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"{value!r} is not a network interface name such as eth0 or bond0.100")
    return value


class Frontend(BaseModel):
    """One address for clients in front of every gateway host."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    # The client address with its prefix, on the gateway hosts' subnet: 192.0.2.10/24.
    vip: Annotated[str, AfterValidator(_vip)]
    # The name clients use for it (your DNS points it at the VIP); the certificate covers both.
    name: Annotated[str, AfterValidator(_dns_name)] | None = None
    # VRRP's virtual router id, 1-255: it must be unique on the link (another VRRP group with the
    # same id would fight over the address); `up` listens for a foreign one before installing.
    router_id: Annotated[int, Field(ge=1, le=255)]
    # The interface that carries the hosts' addresses; None: found on each host, the one holding
    # its inventory address.
    interface: Annotated[str, AfterValidator(_ifname)] | None = None
    # Seconds between two asks of each host's own gateway /readyz; 2 failures in a row give up
    # the VIP (an unready gateway loses it in ~2.5 s, measured in docs/ha.md). Whole seconds:
    # keepalived 2.2 (Debian 12) reads "0.5" as invalid and uses 1.
    check_interval_s: Annotated[int, Field(ge=1, le=60)] = 1
    # VRRP advertisement interval (VRRPv3, centiseconds allowed): a dead holder is noticed after
    # about 3 of them, so 0.5 s moves the VIP within ~2 s.
    advert_interval_s: Annotated[float, Field(ge=0.1, le=40)] = 0.5

    def address(self) -> str:
        """The VIP without its prefix."""
        return str(ip_interface(self.vip).ip)
