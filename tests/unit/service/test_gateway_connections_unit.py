"""What the per-client connection cap counts by: one IPv4 address, or one IPv6 /64."""

import pytest

from service.connections import client_address


@pytest.mark.parametrize(
    ("peer", "client"),
    [
        (("192.0.2.7", 5000), "192.0.2.7"),
        (("::ffff:192.0.2.7", 5000, 0, 0), "192.0.2.7"),  # a v4 client on a dual-stack socket
        (("2001:db8:1:2:aaaa::1", 5000, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 5001, 0, 0), "2001:db8:1:2::/64"),  # same host's /64
        (("fe80::1%eth0", 5000, 0, 2), "fe80::/64"),
        (None, ""),  # no peer address (a Unix socket)
    ],
)
def test_client_address(peer: object, client: str) -> None:
    assert client_address(peer) == client
