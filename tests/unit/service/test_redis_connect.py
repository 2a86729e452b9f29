"""service/redis_connect.py: what the gateways, the usage report and the release controller
give redis-py's Sentinel (the discovery itself is redis-py's, exercised against real sentinels
in tests/integration/test_redis_failover.py and test_redis_sentinel_role.py)."""

from redis.asyncio.sentinel import SentinelManagedSSLConnection

from service.config import LimitsConfig
from service.redis_connect import Endpoint, TLSFiles, async_client, parse_sentinel, sync_client
from service.redis_limits import endpoint

TLS = TLSFiles("/t/ca.pem", "/t/server.pem", "/t/server.key")


def test_sentinel_addresses_parse_with_v6_brackets() -> None:
    assert parse_sentinel("10.0.0.3:26379") == ("10.0.0.3", 26379)
    assert parse_sentinel("[fd00::3]:26379") == ("fd00::3", 26379)


def test_the_url_gives_password_db_and_tls_to_the_primary_and_the_sentinels() -> None:
    ep = Endpoint("rediss://:p%40ss@10.0.0.1:6379/2", (("10.0.0.1", 26379), ("10.0.0.2", 26379)), "pli", TLS)
    client = async_client(ep, 0.5)
    pool = client.connection_pool
    assert pool.connection_class is SentinelManagedSSLConnection and pool.service_name == "pli"
    kw = pool.connection_kwargs
    assert (kw["password"], kw["db"], kw["ssl_ca_certs"], kw["ssl_certfile"]) == ("p@ss", 2, TLS.ca_file, TLS.certfile)
    sentinel = pool.sentinel_manager
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in sentinel.sentinels] == [("10.0.0.1", 26379), ("10.0.0.2", 26379)]
    skw = sentinel.sentinels[0].connection_pool.connection_kwargs
    assert skw["password"] == "p@ss" and skw["ssl_ca_certs"] == TLS.ca_file and skw.get("db", 0) == 0
    sync = sync_client(ep, 2).connection_pool
    assert sync.service_name == "pli" and sync.connection_kwargs["ssl_keyfile"] == TLS.keyfile


def test_without_sentinels_the_url_alone() -> None:
    client = async_client(Endpoint("redis://127.0.0.1:6379/0"), 0.5)
    assert client.connection_pool.connection_kwargs["host"] == "127.0.0.1"


def test_the_gateway_settings_give_the_endpoint() -> None:
    limits = LimitsConfig(redis_url="rediss://:x@10.0.0.1:6379/0",
                          redis_sentinels=["10.0.0.1:26379", "[fd00::2]:26379"])
    ep = endpoint(limits, None)
    assert ep.sentinels == (("10.0.0.1", 26379), ("fd00::2", 26379)) and ep.master == "pli" and ep.tls is None


def test_sentinels_without_a_url_are_refused() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="redis_sentinels need redis_url"):
        LimitsConfig(redis_sentinels=["10.0.0.1:26379"])
